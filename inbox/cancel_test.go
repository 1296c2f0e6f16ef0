// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/textmachine/outbox/inbox"
)

// A context that ends while Open migrates or prepares is reported as the context's error, whatever
// statement SQLite interrupted: a caller branches on context.Canceled, not on the driver's text.
func TestOpenWithAContextThatEndsMidwayFailsWithTheContextsError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	failed := 0
	for i := range 120 {
		ctx, cancel := context.WithCancel(context.Background())
		timer := time.AfterFunc(time.Duration(i%40)*50*time.Microsecond, cancel)
		in, err := inbox.Open(ctx, filepath.Join(dir, fmt.Sprintf("c%d.db", i)))
		timer.Stop()
		cancel()
		if err != nil {
			failed++
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Open %d: %v, want an error wrapping context.Canceled", i, err)
			}
			continue
		}
		in.Close()
	}
	if failed == 0 {
		t.Log("no Open met its cancellation; nothing was checked this run")
	}
}

// A context that ends while Apply runs its statements fails the call with the context's error, even
// when the statement SQLite interrupted is the inbox's own.
func TestApplyWithAContextThatEndsMidwayFailsWithTheContextsError(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	_, err := in.Apply(ctx, lines("r", 1, 50), func(hctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if n++; n == 10 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply: %v, want an error wrapping context.Canceled", err)
	}
	if pos := position(t, in, "r"); pos != 0 {
		t.Errorf("position %d after the cancelled call, want 0", pos)
	}
	if rep := mustApply(t, in, lines("r", 1, 50)); rep.Applied != 50 {
		t.Errorf("the same lines again: %+v", rep)
	}
}

func TestHandlerCancellingItsContextCommitsNothing(t *testing.T) {
	in, path := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	rep, err := in.Apply(ctx, lines("r", 1, 3), func(c context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.Seq == 2 {
			cancel()
		}
		return insertHandler(c, tx, ev)
	})
	if !errors.Is(err, context.Canceled) || rep != (inbox.Report{}) {
		t.Fatalf("%+v %v", rep, err)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Fatalf("%d rows", n)
	}
	if p := position(t, in, "r"); p != 0 {
		t.Fatalf("position %d", p)
	}
	mustApply(t, in, lines("r", 1, 3))
}
