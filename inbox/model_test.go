// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
)

// model is the inbox's rules written as plainly as possible, to check the inbox against.
type model struct {
	window      int64
	hwm         map[string]int64
	digests     map[string]map[int64][32]byte
	quarantined map[string]string
}

func newModel(window int64) *model {
	return &model{window: window, hwm: map[string]int64{}, digests: map[string]map[int64][32]byte{}, quarantined: map[string]string{}}
}

// apply returns the report of a call, or false when the handler stops it (the model is then left as
// it was).
func (m *model) apply(ls [][]byte, parked func(run string, seq int64) bool) inbox.Report {
	var rep inbox.Report
	for _, l := range ls {
		run, seq := keyOf(l)
		d := sha256.Sum256(l)
		hwm := m.hwm[run]
		switch {
		case m.quarantined[run] != "":
			rep.Quarantined++
		case seq == hwm+1 && parked(run, seq):
			m.quarantined[run] = "handler"
			rep.Quarantined++
		case seq == hwm+1:
			m.hwm[run] = seq
			if m.digests[run] == nil {
				m.digests[run] = map[int64][32]byte{}
			}
			m.digests[run][seq] = d
			delete(m.digests[run], seq-m.window)
			rep.Applied++
		case seq > hwm+1:
			m.quarantined[run] = "gap"
			rep.Quarantined++
		case seq <= hwm-m.window:
			rep.Stale++
		case m.digests[run][seq] == d:
			rep.Duplicates++
		default:
			m.quarantined[run] = "conflict"
			rep.Quarantined++
		}
	}
	return rep
}

// keyOf reads a line's key; parsing is the journal's, the decisions are the model's.
func keyOf(l []byte) (string, int64) {
	run, seq, err := journal.LineKey(l)
	if err != nil {
		panic(err)
	}
	return run, seq
}

func TestRandomCallsAgreeWithTheModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			const window = 8
			rng := rand.New(rand.NewPCG(seed, 1))
			in, path := setup(t, inbox.WithDigestWindow(window))
			m := newModel(window)
			runs := []string{"a", "b", "c"}
			written := map[string]int64{} // how far each run's "journal" goes
			parked := func(run string, seq int64) bool { return run == "c" && seq%13 == 0 }
			h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
				if parked(ev.RunID, ev.Seq) {
					return fmt.Errorf("refused: %w", inbox.ErrQuarantine)
				}
				return insertHandler(ctx, tx, ev)
			}
			for call := range 60 {
				var ls [][]byte
				for range rng.IntN(20) + 1 {
					run := runs[rng.IntN(len(runs))]
					next := written[run] + 1
					switch p := rng.IntN(100); {
					case p < 70:
						written[run] = next
						ls = append(ls, line(run, next))
					case p < 85 && next > 1:
						ls = append(ls, line(run, 1+rng.Int64N(next-1)))
					case p < 90 && next > 1:
						ls = append(ls, line(run, 1+rng.Int64N(next-1), "other"))
					case p < 93:
						ls = append(ls, line(run, next+1+rng.Int64N(3)))
					default:
						written[run] = next
						ls = append(ls, line(run, next))
					}
				}
				want := m.apply(ls, parked)
				got, err := in.Apply(context.Background(), ls, h)
				if err != nil {
					t.Fatalf("call %d: %v", call, err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("call %d: report (-model +inbox):\n%s", call, diff)
				}
				if got.Applied+got.Duplicates+got.Stale+got.Quarantined != len(ls) {
					t.Fatalf("call %d: %+v for %d lines", call, got, len(ls))
				}
				for _, run := range runs {
					if p := position(t, in, run); p != m.hwm[run] {
						t.Fatalf("call %d: run %s at %d, model %d", call, run, p, m.hwm[run])
					}
				}
				var q []string
				for _, x := range quarantined(t, in) {
					q = append(q, x.RunID+":"+x.Reason)
				}
				var mq []string
				for run, why := range m.quarantined {
					mq = append(mq, run+":"+why)
				}
				slices.Sort(mq)
				if diff := cmp.Diff(mq, q); diff != "" {
					t.Fatalf("call %d: quarantined (-model +inbox):\n%s", call, diff)
				}
				// Now and then the operator releases a run; its journal is delivered again.
				if call%7 == 6 {
					for run := range m.quarantined {
						if err := in.Release(context.Background(), run); err != nil {
							t.Fatal(err)
						}
						delete(m.quarantined, run)
						written[run] = m.hwm[run] // the lost or changed lines are written again
					}
				}
			}
			n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`)
			total := 0
			for _, hwm := range m.hwm {
				total += int(hwm)
			}
			if n != total {
				t.Errorf("%d rows applied, the model's runs hold %d lines", n, total)
			}
		})
	}
}
