// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// model is what the store and the journal must hold, kept the simple way.
type model struct {
	lines     map[string][][]byte // per run, every line committed, by seq-1
	onceOf    map[string]map[int64]string
	ledger    map[string]bool // keys whose line reached the journal
	pending   map[string]bool // keys enqueued, not yet in the journal
	journal   map[string]int64
	forgotten map[string]int64 // per run, lines before this seq may be gone from the store
}

// failingSink is a journal file that can be told to fail.
type failingSink struct {
	j    *journal.File
	fail bool
}

func (f *failingSink) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if f.fail {
		return errors.New("sink down")
	}
	return f.j.Append(ctx, runID, lines)
}

// TestRandomOperationsAgreeWithASimpleModel runs a random sequence of enqueues, announcements, caller
// transactions that commit or roll back, relay steps, sink outages and restarts (with recovery), and
// after every step compares the store and the journal with the model. OUTBOX_MODEL_SEED replays a
// sequence; OUTBOX_MODEL_STEPS lengthens it.
func TestRandomOperationsAgreeWithASimpleModel(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("OUTBOX_MODEL_SEED"), 10, 64); err == nil {
		seed = v
	}
	steps := 400
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_MODEL_STEPS")); err == nil {
		steps = v
	}
	t.Logf("seed %d (replay with OUTBOX_MODEL_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x6d6f64656c))
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")

	m := &model{lines: map[string][][]byte{}, onceOf: map[string]map[int64]string{}, ledger: map[string]bool{},
		pending: map[string]bool{}, journal: map[string]int64{}, forgotten: map[string]int64{}}
	starts := 0
	var s *outbox.Store
	var sink *failingSink
	var relay *outbox.Relay
	var run string
	start := func() {
		starts++
		run = fmt.Sprintf("run-%d", starts)
		var err error
		if s, err = outbox.Open(ctx, dbPath, outbox.WithDurability(outbox.DurabilityNormal)); err != nil {
			t.Fatal(err)
		}
		j, err := journal.OpenFile(jPath)
		if err != nil {
			t.Fatal(err)
		}
		sink = &failingSink{j: j}
		relay = outboxtest.NewRelay(t, s, sink, run, outbox.WithBatchSize(1+rng.IntN(5)), outbox.WithFlushAttempts(1),
			outbox.WithBackoff(time.Millisecond, time.Millisecond), outbox.WithForgetProjected(false))
		if err := relay.Recover(ctx); err != nil {
			t.Fatalf("recover: %v", err)
		}
		// Recovery projected every earlier run and forgot its buffered lines.
		for r, ls := range m.lines {
			if r == run {
				continue
			}
			m.journal[r] = int64(len(ls))
			for seq, key := range m.onceOf[r] {
				if seq <= int64(len(ls)) {
					delete(m.pending, key)
					m.ledger[key] = true
				}
			}
			m.forgotten[r] = int64(len(ls)) + 1
		}
	}
	stop := func() {
		// After a failed start, what it did not open is nil.
		if sink != nil {
			sink.j.Close()
		}
		if s != nil {
			s.Close()
		}
	}
	start()
	defer func() { stop() }()

	line := func(seq int64, what string) []byte {
		return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"what":%q}`, run, seq, what)
	}
	reannounced := 0 // announcements of a key still pending: the case the ledger's second index is for
	defer func() { t.Logf("%d announcements of a pending key", reannounced) }()
	for step := 0; step < steps; step++ {
		var op string
		switch k := rng.IntN(100); {
		case k < 25:
			op = "enqueue"
			seq, err := s.EnqueueEvent(ctx, run, func(seq int64) ([]byte, error) { return line(seq, "e"), nil })
			if err != nil {
				t.Fatalf("step %d %s: %v", step, op, err)
			}
			m.lines[run] = append(m.lines[run], line(seq, "e"))
		case k < 50:
			// A small pool of keys, so that keys are often announced again while still pending.
			key := "unit:" + strconv.Itoa(rng.IntN(6))
			op = "once " + key
			ok, seq, err := s.EnqueueOnce(ctx, run, key, func(seq int64) ([]byte, error) { return line(seq, key), nil })
			if err != nil {
				t.Fatalf("step %d %s: %v", step, op, err)
			}
			if m.pending[key] {
				reannounced++
			}
			if want := !m.ledger[key] && !m.pending[key]; ok != want {
				t.Fatalf("step %d %s: announcing = %v, the model says %v", step, op, ok, want)
			}
			if ok {
				m.lines[run] = append(m.lines[run], line(seq, key))
				if m.onceOf[run] == nil {
					m.onceOf[run] = map[int64]string{}
				}
				m.onceOf[run][seq] = key
				m.pending[key] = true
			}
		case k < 60:
			commit := rng.IntN(2) == 0
			op = fmt.Sprintf("caller tx (commit %v)", commit)
			var seq int64
			err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				var err error
				if seq, err = s.EnqueueTx(ctx, tx, run, func(seq int64) ([]byte, error) { return line(seq, "tx"), nil }); err != nil {
					return err
				}
				if !commit {
					return outboxtest.ErrRender
				}
				return nil
			})
			if commit {
				if err != nil {
					t.Fatalf("step %d %s: %v", step, op, err)
				}
				m.lines[run] = append(m.lines[run], line(seq, "tx"))
			} else if !errors.Is(err, outboxtest.ErrRender) {
				t.Fatalf("step %d %s: %v", step, op, err)
			}
		case k < 72:
			op = fmt.Sprintf("relay flush (sink failing %v)", sink.fail)
			err := relay.Flush(ctx)
			if sink.fail {
				if err == nil && int64(len(m.lines[run])) > m.journal[run] {
					t.Fatalf("step %d %s: Flush succeeded through a failing sink", step, op)
				}
				break
			}
			if err != nil {
				t.Fatalf("step %d %s: %v", step, op, err)
			}
			m.journal[run] = int64(len(m.lines[run]))
			for seq, key := range m.onceOf[run] {
				if seq <= m.journal[run] {
					delete(m.pending, key)
					m.ledger[key] = true
				}
			}
		case k < 88:
			sink.fail = !sink.fail
			op = fmt.Sprintf("sink failing = %v", sink.fail)
		default: // 12%
			op = "restart"
			stop()
			start()
		}
		checkModel(t, step, op, s, jPath, m)
	}
}

func checkModel(t *testing.T, step int, op string, s *outbox.Store, jPath string, m *model) {
	t.Helper()
	ctx := context.Background()
	for r, ls := range m.lines {
		got := outboxtest.AllLines(t, s, r)
		// Lines of a forgotten run are gone except its ledger rows, and a ledger row keeps its key and
		// its line's digest, not the line, once its line is projected.
		var want []outbox.EventLine
		for i, l := range ls {
			seq := int64(i + 1)
			if seq < m.forgotten[r] && m.onceOf[r][seq] == "" {
				continue
			}
			if m.onceOf[r][seq] != "" && seq <= m.journal[r] {
				continue
			}
			want = append(want, outbox.EventLine{Seq: seq, Line: l})
		}
		if len(got) != len(want) {
			t.Fatalf("step %d (%s): run %s has %d stored lines, the model %d", step, op, r, len(got), len(want))
		}
		for i := range want {
			if got[i].Seq != want[i].Seq || !bytes.Equal(got[i].Line, want[i].Line) {
				t.Fatalf("step %d (%s): run %s line %d is %s, the model %s", step, op, r, want[i].Seq, got[i].Line, want[i].Line)
			}
		}
	}
	ledger, err := s.AnnouncedOnceKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var gotKeys, wantKeys []string
	for k := range ledger {
		gotKeys = append(gotKeys, k)
	}
	for k := range m.ledger {
		wantKeys = append(wantKeys, k)
	}
	slices.Sort(gotKeys)
	slices.Sort(wantKeys)
	if !slices.Equal(gotKeys, wantKeys) {
		t.Fatalf("step %d (%s): ledger %v, the model %v", step, op, gotKeys, wantKeys)
	}
	b, err := os.ReadFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := journal.Verify(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("step %d (%s): journal: %v", step, op, err)
	}
	for r, n := range m.journal {
		if rep.Runs[r].Last != n {
			t.Fatalf("step %d (%s): the journal holds run %s up to %d, the model %d", step, op, r, rep.Runs[r].Last, n)
		}
	}
	for r := range rep.Runs {
		if _, ok := m.journal[r]; !ok {
			t.Fatalf("step %d (%s): the journal holds run %s, which the model never projected", step, op, r)
		}
	}
}
