package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
)

func TestPlainApplyDuplicatesAndSourcePositions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setup(t)
	rep := mustApply(t, in, lines("r", 1, 3))
	if diff := cmp.Diff(inbox.Report{Applied: 3}, rep); diff != "" {
		t.Fatal(diff)
	}
	rep = mustApply(t, in, lines("r", 1, 5))
	if diff := cmp.Diff(inbox.Report{Applied: 2, Duplicates: 3}, rep); diff != "" {
		t.Fatal(diff)
	}
	if p := position(t, in, "r"); p != 5 {
		t.Fatalf("position %d", p)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 5 {
		t.Fatalf("%d rows", n)
	}
	rep, err := in.ApplyFrom(ctx, "file:/x", nil, []byte("p1"), lines("s", 1, 2), insertHandler)
	if err != nil || rep.Applied != 2 {
		t.Fatal(rep, err)
	}
	if _, err := in.ApplyFrom(ctx, "file:/x", nil, []byte("p2"), lines("s", 3, 3), insertHandler); !errors.Is(err, inbox.ErrSourceMoved) {
		t.Fatalf("moved source: %v", err)
	}
	pos, err := in.SourcePosition(ctx, "file:/x")
	if err != nil || !bytes.Equal(pos, []byte("p1")) {
		t.Fatal(pos, err)
	}
}
