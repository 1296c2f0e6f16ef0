// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/textmachine/outbox/inbox"
)

func TestApplyFromStoresThePositionWithTheEffectsOnlyFromTheStoredOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	const src = "file:/var/journal.jsonl"
	if _, err := in.ApplyFrom(ctx, src, nil, []byte("p1"), lines("r", 1, 2), insertHandler); err != nil {
		t.Fatal(err)
	}
	// Stale from: nothing applied, nothing stored.
	for _, from := range [][]byte{nil, []byte("p0"), []byte("p1x")} {
		rep, err := in.ApplyFrom(ctx, src, from, []byte("p2"), lines("r", 3, 4), insertHandler)
		if !errors.Is(err, inbox.ErrSourceMoved) || rep != (inbox.Report{}) {
			t.Errorf("from %q: %+v, %v; want ErrSourceMoved", from, rep, err)
		}
	}
	if p := position(t, in, "r"); p != 2 {
		t.Errorf("position %d", p)
	}
	rep, err := in.ApplyFrom(ctx, src, []byte("p1"), []byte("p2"), lines("r", 3, 4), insertHandler)
	if err != nil || rep.Applied != 2 {
		t.Fatal(rep, err)
	}
	if pos, _ := in.SourcePosition(ctx, src); !bytes.Equal(pos, []byte("p2")) {
		t.Errorf("position %q", pos)
	}
	// A handler error: the position stays with the effects.
	_, err = in.ApplyFrom(ctx, src, []byte("p2"), []byte("p3"), lines("r", 5, 5), func(context.Context, *sql.Tx, inbox.Event) error {
		return errors.New("no")
	})
	if err == nil {
		t.Fatal("the handler's error was lost")
	}
	if pos, _ := in.SourcePosition(ctx, src); !bytes.Equal(pos, []byte("p2")) {
		t.Errorf("position %q after a failed call", pos)
	}
	// No lines: only a check, or a first position.
	if _, err := in.ApplyFrom(ctx, src, []byte("p2"), []byte("p2"), nil, insertHandler); err != nil {
		t.Errorf("check only: %v", err)
	}
	if _, err := in.ApplyFrom(ctx, "nats:S", nil, []byte("n1"), nil, insertHandler); err != nil {
		t.Errorf("first position: %v", err)
	}
	if srcs, _ := in.Sources(ctx); len(srcs) != 2 || srcs[0].Name != src || srcs[0].Updated.IsZero() {
		t.Errorf("sources %+v", srcs)
	}
	// Apply never touches the sources.
	mustApply(t, in, lines("r", 5, 5))
	if pos, _ := in.SourcePosition(ctx, src); !bytes.Equal(pos, []byte("p2")) {
		t.Errorf("position %q after Apply", pos)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM inbox_sources`); n != 2 {
		t.Errorf("%d source rows", n)
	}
}

func TestApplyFromRefusesASourceNameNoSourceHas(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	for _, name := range []string{"", "a\x00b", "a\nb", "\xff", string(make([]byte, inbox.MaxSourceNameLen+1))} {
		if _, err := in.ApplyFrom(context.Background(), name, nil, []byte("p"), lines("r", 1, 1), insertHandler); err == nil {
			t.Errorf("source %q accepted", name)
		}
	}
	if _, err := in.ApplyFrom(context.Background(), "file:/x", nil, make([]byte, inbox.MaxPositionLen+1), lines("r", 1, 1), insertHandler); err == nil {
		t.Error("a position over the limit accepted")
	}
	if p := position(t, in, "r"); p != 0 {
		t.Errorf("position %d", p)
	}
}

func TestApplyFromRefusesABadSourceOrPositionAndAppliesNothing(t *testing.T) {
	in, _ := setup(t)
	ctx := context.Background()
	for name, c := range map[string]struct {
		source string
		to     []byte
	}{
		"empty name":       {"", []byte("1")},
		"long name":        {strings.Repeat("s", inbox.MaxSourceNameLen+1), []byte("1")},
		"invalid utf-8":    {"s\xff", []byte("1")},
		"position too big": {"s", bytes.Repeat([]byte("1"), inbox.MaxPositionLen+1)},
	} {
		rep, err := in.ApplyFrom(ctx, c.source, nil, c.to, lines("r", 1, 2), insertHandler)
		if err == nil || rep != (inbox.Report{}) {
			t.Errorf("%s: %+v %v", name, rep, err)
		}
	}
	if p := position(t, in, "r"); p != 0 {
		t.Fatalf("refused calls applied up to %d", p)
	}
	if srcs, err := in.Sources(ctx); err != nil || len(srcs) != 0 {
		t.Fatalf("%+v %v", srcs, err)
	}
}
