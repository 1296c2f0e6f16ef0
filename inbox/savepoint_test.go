// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/textmachine/outbox/inbox"
)

// setupWrites opens an inbox with a consumer table "writes" that keeps every write, a line's second
// write of the same row too, so that a line applied twice shows.
func setupWrites(t *testing.T, opts ...inbox.Option) (*inbox.Inbox, string) {
	t.Helper()
	in, path := setup(t, opts...)
	err := in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE writes (n INTEGER PRIMARY KEY, what TEXT NOT NULL)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return in, path
}

// write records what in the consumer's table.
func write(ctx context.Context, tx *sql.Tx, what string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO writes (what) VALUES (?)`, what)
	return err
}

// exec runs statements in the handler's transaction, stopping at the first that fails.
func exec(ctx context.Context, tx *sql.Tx, stmts ...string) error {
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// written lists what the consumer's table holds, in the order written.
func written(t *testing.T, path string) []string {
	t.Helper()
	rows, err := rawDB(t, path).Query(`SELECT what FROM writes ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// seqWriter writes each line's seq.
func seqWriter(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
	return write(ctx, tx, fmt.Sprint(ev.Seq))
}

func TestAQuarantinedLineKeepsNoneOfItsWritesWhenItsHandlerOpenedASavepointNamedInboxLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setupWrites(t)
	refuseOnce := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if err := seqWriter(ctx, tx, ev); err != nil {
			return err
		}
		if ev.Seq == 2 {
			if err := exec(ctx, tx, `SAVEPOINT inbox_line`); err != nil {
				return err
			}
			return fmt.Errorf("not yet: %w", inbox.ErrQuarantine)
		}
		return nil
	}
	if rep, err := in.Apply(ctx, lines("r", 1, 2), refuseOnce); err != nil || rep != (inbox.Report{Applied: 1, Quarantined: 1}) {
		t.Fatalf("%+v, %v", rep, err)
	}
	if got := written(t, path); !slices.Equal(got, []string{"1"}) {
		t.Errorf("after the quarantine: %v, want [1]: the quarantined line's write kept", got)
	}
	if err := in.Release(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if rep := mustApplyWith(t, in, lines("r", 1, 2), seqWriter); rep != (inbox.Report{Duplicates: 1, Applied: 1}) {
		t.Fatalf("after the release: %+v", rep)
	}
	if got := written(t, path); !slices.Equal(got, []string{"1", "2"}) {
		t.Errorf("%v, want [1 2]: a line applied once", got)
	}
}

func mustApplyWith(t *testing.T, in *inbox.Inbox, ls [][]byte, h inbox.Handler) inbox.Report {
	t.Helper()
	rep, err := in.Apply(context.Background(), ls, h)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// The outcomes a handler can ask for, and what each must leave of the line: an applied line keeps
// what its handler kept, a quarantined or failed one nothing.
var handlerOutcomes = []struct {
	name string
	err  error
}{
	{"applied", nil},
	{"quarantined", fmt.Errorf("no: %w", inbox.ErrQuarantine)},
	{"failed", errors.New("boom")},
}

func TestSavepointsAHandlerOpensOfItsOwnEndWithItsLineWhateverItLeavesOpen(t *testing.T) {
	t.Parallel()
	for name, stmts := range map[string][]string{
		"left open":          {`SAVEPOINT mine`},
		"released":           {`SAVEPOINT mine`, `RELEASE mine`},
		"nested, left open":  {`SAVEPOINT mine`, `SAVEPOINT inner`},
		"rolled back to":     {`SAVEPOINT mine`, `ROLLBACK TO mine`},
		"reopened each line": {`SAVEPOINT mine`, `SAVEPOINT mine`},
	} {
		for _, out := range handlerOutcomes {
			t.Run(name+", "+out.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				in, path := setupWrites(t)
				h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
					if ev.RunID != "r" {
						return seqWriter(ctx, tx, ev)
					}
					if err := write(ctx, tx, "before"); err != nil {
						return err
					}
					if err := exec(ctx, tx, stmts...); err != nil {
						return err
					}
					if err := write(ctx, tx, "after"); err != nil {
						return err
					}
					return out.err
				}
				rep, err := in.Apply(ctx, [][]byte{line("s", 1), line("r", 1), line("s", 2)}, h)
				got := written(t, path)
				switch out.err {
				case nil:
					if err != nil || rep != (inbox.Report{Applied: 3}) {
						t.Fatalf("%+v, %v", rep, err)
					}
					if want := []string{"1", "before", "after", "2"}; !slices.Equal(got, want) {
						t.Errorf("%v, want %v", got, want)
					}
				case handlerOutcomes[1].err:
					if err != nil || rep != (inbox.Report{Applied: 2, Quarantined: 1}) {
						t.Fatalf("%+v, %v", rep, err)
					}
					if want := []string{"1", "2"}; !slices.Equal(got, want) {
						t.Errorf("%v, want %v: the quarantined line's writes kept", got, want)
					}
					if p := position(t, in, "r"); p != 0 {
						t.Errorf("position %d", p)
					}
				default:
					if !errors.Is(err, out.err) {
						t.Fatalf("%+v, %v, want the handler's error", rep, err)
					}
					if len(got) != 0 {
						t.Errorf("%v stored by a failed call", got)
					}
				}
			})
		}
	}
}

// knownName is the name a test gives the inbox's savepoint, to play a handler that knows it.
const knownName = "inbox_line"

func TestAHandlerThatReleasesTheInboxsSavepointFailsTheCallWithNothingStored(t *testing.T) {
	t.Parallel()
	for _, out := range handlerOutcomes[:2] {
		t.Run(out.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			in, path := setupWrites(t, inbox.WithLineSavepoint(knownName))
			h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				if err := seqWriter(ctx, tx, ev); err != nil {
					return err
				}
				if ev.Seq == 2 {
					if err := exec(ctx, tx, `RELEASE `+knownName); err != nil {
						return err
					}
					return out.err
				}
				return nil
			}
			for i := range 2 {
				rep, err := in.Apply(ctx, lines("r", 1, 3), h)
				if !errors.Is(err, inbox.ErrSavepointMisused) {
					t.Fatalf("call %d: %+v, %v, want ErrSavepointMisused", i, rep, err)
				}
				if msg := err.Error(); !strings.Contains(msg, `run "r" seq 2`) {
					t.Errorf("call %d: %q does not name the line", i, msg)
				}
				if got := written(t, path); len(got) != 0 {
					t.Errorf("call %d: %v stored", i, got)
				}
				if p := position(t, in, "r"); p != 0 {
					t.Errorf("call %d: position %d", i, p)
				}
				if qs := quarantined(t, in); len(qs) != 0 {
					t.Errorf("call %d: quarantined %v", i, qs)
				}
			}
			if rep := mustApplyWith(t, in, lines("r", 1, 3), seqWriter); rep != (inbox.Report{Applied: 3}) {
				t.Errorf("afterwards: %+v", rep)
			}
		})
	}
}

func TestAHandlerThatOpensASavepointOfTheInboxsNameFailsTheCallWithNothingStored(t *testing.T) {
	t.Parallel()
	for _, out := range handlerOutcomes[:2] {
		for _, where := range []string{"after its writes", "before its writes", "left open after its own"} {
			t.Run(out.name+", "+where, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				in, path := setupWrites(t, inbox.WithLineSavepoint(knownName))
				h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
					if ev.RunID != "r" {
						return seqWriter(ctx, tx, ev)
					}
					var stmts []string
					switch where {
					case "before its writes":
						stmts = []string{`SAVEPOINT ` + knownName}
					case "left open after its own":
						stmts = []string{`SAVEPOINT mine`, `SAVEPOINT ` + knownName}
					}
					if err := exec(ctx, tx, stmts...); err != nil {
						return err
					}
					if err := seqWriter(ctx, tx, ev); err != nil {
						return err
					}
					if where == "after its writes" {
						if err := exec(ctx, tx, `SAVEPOINT `+knownName); err != nil {
							return err
						}
					}
					return out.err
				}
				rep, err := in.Apply(ctx, [][]byte{line("s", 1), line("r", 1), line("s", 2)}, h)
				if !errors.Is(err, inbox.ErrSavepointMisused) {
					t.Fatalf("%+v, %v, want ErrSavepointMisused", rep, err)
				}
				if got := written(t, path); len(got) != 0 {
					t.Errorf("%v stored", got)
				}
				if qs := quarantined(t, in); len(qs) != 0 {
					t.Errorf("quarantined %v", qs)
				}
			})
		}
	}
}

func TestAHandlerThatRollsBackToTheInboxsSavepointUndoesOnlyItsOwnLine(t *testing.T) {
	t.Parallel()
	for _, out := range handlerOutcomes[:2] {
		t.Run(out.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			in, path := setupWrites(t, inbox.WithLineSavepoint(knownName))
			h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				if ev.Seq != 2 {
					return seqWriter(ctx, tx, ev)
				}
				if err := write(ctx, tx, "undone"); err != nil {
					return err
				}
				if err := exec(ctx, tx, `ROLLBACK TO `+knownName); err != nil {
					return err
				}
				if err := write(ctx, tx, "kept"); err != nil {
					return err
				}
				return out.err
			}
			rep, err := in.Apply(ctx, lines("r", 1, 3), h)
			if err != nil {
				t.Fatal(err)
			}
			want, wantRep := []string{"1", "kept", "3"}, inbox.Report{Applied: 3}
			if out.err != nil {
				want, wantRep = []string{"1"}, inbox.Report{Applied: 1, Quarantined: 2}
			}
			if rep != wantRep {
				t.Errorf("%+v, want %+v", rep, wantRep)
			}
			if got := written(t, path); !slices.Equal(got, want) {
				t.Errorf("%v, want %v", got, want)
			}
		})
	}
}

func TestAHandlerThatCommitsOrRollsBackWithASavepointOpenIsRefusedWithNothingStored(t *testing.T) {
	t.Parallel()
	for _, end := range []string{`COMMIT`, `ROLLBACK`, `END`} {
		for _, name := range []string{"mine", knownName} {
			t.Run(end+" inside "+name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				in, path := setupWrites(t, inbox.WithLineSavepoint(knownName))
				h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
					if err := seqWriter(ctx, tx, ev); err != nil {
						return err
					}
					if ev.Seq == 2 {
						exec(ctx, tx, `SAVEPOINT `+name, `INSERT INTO writes (what) VALUES ('inside')`, end)
						return fmt.Errorf("no: %w", inbox.ErrQuarantine)
					}
					return nil
				}
				rep, err := in.Apply(ctx, lines("r", 1, 3), h)
				if !errors.Is(err, inbox.ErrTxEnded) {
					t.Fatalf("%+v, %v, want ErrTxEnded", rep, err)
				}
				if got := written(t, path); len(got) != 0 {
					t.Errorf("%v stored", got)
				}
				if rep := mustApplyWith(t, in, lines("r", 1, 3), seqWriter); rep != (inbox.Report{Applied: 3}) {
					t.Errorf("afterwards: %+v", rep)
				}
			})
		}
	}
}

func TestAHandlerCannotReachTheInboxsSavepointByAnyNameItCanKnow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setupWrites(t)
	var errs []error
	h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if err := seqWriter(ctx, tx, ev); err != nil {
			return err
		}
		for _, name := range []string{"inbox_line", inbox.SavepointPrefix, strings.ToUpper(inbox.SavepointPrefix)} {
			errs = append(errs, exec(ctx, tx, `RELEASE `+name))
		}
		return fmt.Errorf("no: %w", inbox.ErrQuarantine)
	}
	if rep, err := in.Apply(ctx, lines("r", 1, 1), h); err != nil || rep != (inbox.Report{Quarantined: 1}) {
		t.Fatalf("%+v, %v", rep, err)
	}
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "no such savepoint") {
			t.Errorf("release %d: %v, want no such savepoint", i, err)
		}
	}
	if got := written(t, path); len(got) != 0 {
		t.Errorf("%v stored by a quarantined line", got)
	}
}

func TestAFileLineQuarantinedByAHandlerThatOpenedASavepointNamedInboxLineAppliesOnceAfterRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, path := setupWrites(t)
	journalPath := filepath.Join(t.TempDir(), "journal.jsonl")
	var body []byte
	for _, l := range [][]byte{line("a", 1), line("a", 2), line("b", 1)} {
		body = append(append(body, l...), '\n')
	}
	if err := os.WriteFile(journalPath, body, 0o600); err != nil {
		t.Fatal(err)
	}
	writeKey := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		return write(ctx, tx, fmt.Sprintf("%s/%d", ev.RunID, ev.Seq))
	}
	refuse := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if err := writeKey(ctx, tx, ev); err != nil {
			return err
		}
		if ev.RunID == "a" && ev.Seq == 2 {
			if err := exec(ctx, tx, `SAVEPOINT inbox_line`); err != nil {
				return err
			}
			return fmt.Errorf("not yet: %w", inbox.ErrQuarantine)
		}
		return nil
	}
	if rep, err := in.ApplyFile(ctx, journalPath, refuse); err != nil || rep != (inbox.Report{Applied: 2, Quarantined: 1}) {
		t.Fatalf("ApplyFile: %+v, %v", rep, err)
	}
	if err := in.Release(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if rep, err := in.ApplyFile(ctx, journalPath, writeKey); err != nil || rep != (inbox.Report{Applied: 1, Duplicates: 2}) {
		t.Fatalf("after the release: %+v, %v", rep, err)
	}
	if got, want := written(t, path), []string{"a/1", "b/1", "a/2"}; !slices.Equal(got, want) {
		t.Errorf("%v, want %v: each line once", got, want)
	}
}
