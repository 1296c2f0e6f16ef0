// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

var errPowerOff = errors.New("power is off")

// powerOps tracks what of the file is durable: the length the last fdatasync covered. When the power
// goes (at the cut-th call of WriteAt or Datasync), every later call fails, and crash() leaves the file
// as a disk might: the durable part, plus some prefix of what was written after it.
type powerOps struct {
	mu      sync.Mutex
	calls   int
	cut     int
	off     bool
	durable int64
	written int64 // the end of the last write
}

func (o *powerOps) step() bool {
	o.calls++
	if o.calls == o.cut {
		o.off = true
	}
	return o.off
}

func (o *powerOps) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.step() {
		return 0, errPowerOff
	}
	n, err := f.WriteAt(b, off)
	o.written = max(o.written, off+int64(n))
	return n, err
}

func (o *powerOps) Datasync(f *os.File) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.step() {
		return errPowerOff
	}
	if err := datasync(f); err != nil {
		return err
	}
	o.durable = o.written
	return nil
}

func (o *powerOps) Truncate(f *os.File, size int64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.off {
		return errPowerOff
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	o.written = min(o.written, size)
	return nil
}

// crash leaves the file with its durable part and a random prefix of the rest.
func (o *powerOps) crash(path string, rng *rand.Rand) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	keep := o.durable
	if extra := int64(len(b)) - o.durable; extra > 0 {
		keep += rng.Int64N(extra + 1)
	}
	return os.WriteFile(path, b[:keep], 0o644)
}

// TestPowerLossAtEveryStepOfTheJournalLosesNoAcknowledgedLine cuts the power at each write and each
// fdatasync of a relay's run over a backlog, leaves the journal as a disk might (what was synced, and
// some of what was not), restarts, and finishes. Lines whose append was acknowledged were synced and
// survive; the others are re-sent, byte for byte, so the journal ends with every line, no gap and no
// conflict.
func TestPowerLossAtEveryStepOfTheJournalLosesNoAcknowledgedLine(t *testing.T) {
	t.Parallel()
	const n, batch = 30, 4 // 8 batches: 16 steps
	rng := rand.New(rand.NewPCG(1, 2))
	for cut := 1; cut <= 2*((n+batch-1)/batch); cut++ {
		ctx := context.Background()
		dir := t.TempDir()
		path := filepath.Join(dir, "j.jsonl")
		s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"))
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= n; i++ {
			if _, err := s.EnqueueEvent(ctx, "r", Builder("r", "x", i)); err != nil {
				t.Fatal(err)
			}
		}
		ops := &powerOps{cut: cut}
		j, err := openFile(path, ops)
		if err != nil {
			t.Fatal(err)
		}
		// Until the power goes: the relay projects and records what the journal acknowledged.
		err = outboxtest.NewRelay(t, s, j, "r", outbox.WithBatchSize(batch), outbox.WithFlushAttempts(1)).Flush(ctx)
		if !errors.Is(err, errPowerOff) {
			t.Fatalf("cut %d: Flush = %v, want the power cut", cut, err)
		}
		acknowledged, _ := s.Projected(ctx, "r")
		j.Close()
		if err := ops.crash(path, rng); err != nil {
			t.Fatal(err)
		}
		// The restart: the journal reopened (its torn tail cut), the relay recovering.
		j, err = OpenFile(path)
		if err != nil {
			t.Fatalf("cut %d: reopen: %v", cut, err)
		}
		b, _ := os.ReadFile(path)
		rep, err := Verify(bytes.NewReader(b))
		if err != nil || rep.Runs["r"].Last < acknowledged {
			t.Errorf("cut %d: after the power cut the journal holds %+v (%v), %d lines were acknowledged", cut, rep, err, acknowledged)
		}
		if err := outboxtest.NewRelay(t, s, j, "r", outbox.WithBatchSize(batch), outbox.WithBackoff(time.Millisecond, time.Millisecond)).Flush(ctx); err != nil {
			t.Fatalf("cut %d: finish: %v", cut, err)
		}
		j.Close()
		s.Close()
		b, _ = os.ReadFile(path)
		rep, err = Verify(bytes.NewReader(b))
		if err != nil || rep.TornTail || rep.Runs["r"].Last != n {
			t.Errorf("cut %d: at the end the journal holds %+v (%v)", cut, rep, err)
		}
	}
}
