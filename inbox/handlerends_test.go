// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/textmachine/outbox/inbox"
)

// A handler that ends the inbox's transaction and opens another in its place (so that the
// connection is inside a transaction again when it returns), going on whatever each statement
// answers, commits nothing of the lines before it: its COMMIT is turned into a rollback, the call
// fails, and the next call applies every line once.
func TestAHandlerThatCommitsAndBeginsAgainStoresNothingAndNoLineIsAppliedTwice(t *testing.T) {
	t.Parallel()
	for _, stmts := range [][]string{
		{`COMMIT`, `BEGIN`},
		{`COMMIT`, `BEGIN IMMEDIATE`},
		{`END`, `SAVEPOINT again`},
		{`COMMIT`, `SAVEPOINT inbox_line`},
		{`ROLLBACK`, `BEGIN`},
		{`SAVEPOINT mine`, `COMMIT`, `BEGIN`},
		{`SAVEPOINT mine`, `RELEASE mine`, `COMMIT`, `BEGIN`, `SAVEPOINT mine`},
	} {
		for _, ret := range []error{nil, fmt.Errorf("no: %w", inbox.ErrQuarantine), errors.New("boom")} {
			t.Run(fmt.Sprint(stmts, ret), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				in, path := setupWrites(t)
				h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
					if err := seqWriter(ctx, tx, ev); err != nil {
						return err
					}
					if ev.Seq == 2 {
						for _, st := range stmts {
							tx.ExecContext(ctx, st) // each whatever the one before did
						}
						return ret
					}
					return nil
				}
				rep, err := in.Apply(ctx, lines("r", 1, 3), h)
				switch {
				case ret != nil && !errors.Is(ret, inbox.ErrQuarantine):
					if !errors.Is(err, ret) {
						t.Fatalf("%+v, %v: want the handler's error", rep, err)
					}
				case !errors.Is(err, inbox.ErrTxEnded) && !errors.Is(err, inbox.ErrSavepointMisused):
					t.Fatalf("%+v, %v: want ErrTxEnded or ErrSavepointMisused", rep, err)
				}
				if got := written(t, path); len(got) != 0 {
					t.Fatalf("%v stored (%v)", got, err)
				}
				if p := position(t, in, "r"); p != 0 {
					t.Fatalf("position %d", p)
				}
				if rep := mustApplyWith(t, in, lines("r", 1, 3), seqWriter); rep != (inbox.Report{Applied: 3}) {
					t.Fatalf("afterwards: %+v", rep)
				}
				if got := written(t, path); len(got) != 3 {
					t.Fatalf("afterwards %v", got)
				}
			})
		}
	}
}
