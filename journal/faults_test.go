// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// TestATornTailCutAtEveryByteOffsetIsRepairedAndTheStreamGoesOn cuts a journal's last line at every
// byte offset (inside multi-byte UTF-8 too), opens it, appends the line again, and verifies.
func TestATornTailCutAtEveryByteOffsetIsRepairedAndTheStreamGoesOn(t *testing.T) {
	t.Parallel()
	first := `{"engine_run_id":"r","seq":1,"type":"x"}` + "\n"
	last := `{"engine_run_id":"r","seq":2,"type":"ünïcødé ✓ 日本語 😀"}`
	for cut := 0; cut <= len(last); cut++ {
		path := filepath.Join(t.TempDir(), "j.jsonl")
		os.WriteFile(path, []byte(first+last[:cut]), 0o644)
		j, err := OpenFile(path)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		if err := j.Append(context.Background(), "r", []outbox.EventLine{{Seq: 2, Line: []byte(last)}}); err != nil {
			t.Fatalf("cut %d: append: %v", cut, err)
		}
		j.Close()
		b, _ := os.ReadFile(path)
		rep, err := Verify(bytes.NewReader(b))
		if err != nil || rep.TornTail || rep.Runs["r"].Last != 2 || rep.Lines != 2 {
			t.Errorf("cut %d: (%+v, %v)\n%q", cut, rep, err, b)
		}
	}
}

// scriptedOps fails calls from, from+1 and from+2 of WriteAt (when writeErr is set) or of Datasync
// (when syncErr is set), counting calls from 1.
type scriptedOps struct {
	osOps
	mu        sync.Mutex
	writeErr  error
	syncErr   error
	shortHalf bool // a failing write first writes half its bytes
	from      int
	writes    int
	syncs     int
	injected  int
}

func (o *scriptedOps) failing(call int) bool { return call >= o.from && call < o.from+3 }

func (o *scriptedOps) WriteAt(f *os.File, b []byte, off int64) (int, error) {
	o.mu.Lock()
	o.writes++
	fail := o.writeErr != nil && o.failing(o.writes)
	if fail {
		o.injected++
	}
	o.mu.Unlock()
	if fail {
		n := 0
		if o.shortHalf {
			n, _ = f.WriteAt(b[:len(b)/2], off)
		}
		return n, o.writeErr
	}
	return f.WriteAt(b, off)
}

func (o *scriptedOps) Datasync(f *os.File) error {
	o.mu.Lock()
	o.syncs++
	fail := o.syncErr != nil && o.failing(o.syncs)
	if fail {
		o.injected++
	}
	o.mu.Unlock()
	if fail {
		return o.syncErr
	}
	return datasync(f)
}

// reopening is a sink that reopens its journal after a failed fdatasync, as a long-running engine
// must: the File refuses appends until then.
type reopening struct {
	path string
	ops  *scriptedOps
	j    *File
}

func (r *reopening) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	if r.j == nil {
		j, err := openFile(r.path, r.ops)
		if err != nil {
			return err
		}
		r.j = j
	}
	err := r.j.Append(ctx, runID, lines)
	if errors.Is(err, ErrFailed) || (err != nil && strings.Contains(err.Error(), "fdatasync")) {
		r.j.Close()
		r.j = nil
	}
	return err
}

// countingHandler counts log records by level, to check that a failing relay logs once per change of
// state, not once per attempt.
type countingHandler struct {
	mu    sync.Mutex
	warns int
	infos int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.Level {
	case slog.LevelWarn:
		h.warns++
	case slog.LevelInfo:
		h.infos++
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// TestIOErrorsAtEveryCallDegradeTheRelayAndLoseNothing fails the c-th call of the journal's write or
// fdatasync, and the two after it, with EIO or ENOSPC, for every c across a relay's whole run over a
// backlog. The relay keeps the rows, backs off, logs once when it starts failing and once when it
// recovers; afterwards the journal holds every line (once, or again as a byte-identical re-delivery)
// and never half a batch.
func TestIOErrorsAtEveryCallDegradeTheRelayAndLoseNothing(t *testing.T) {
	t.Parallel()
	const n, batch = 40, 5 // 8 batches: at least 8 writes and 8 fdatasyncs
	for _, tc := range []struct {
		name        string
		write, sync error
		half        bool
	}{
		{"write EIO", syscall.EIO, nil, false},
		{"write ENOSPC after half its bytes", syscall.ENOSPC, nil, true},
		{"fdatasync EIO", nil, syscall.EIO, false},
		{"fdatasync ENOSPC", nil, syscall.ENOSPC, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for from := 1; from <= n/batch; from++ {
				ctx := context.Background()
				dir := t.TempDir()
				logs := &countingHandler{}
				s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"), outbox.WithLogger(slog.New(logs)))
				if err != nil {
					t.Fatal(err)
				}
				for i := 1; i <= n; i++ {
					if _, err := s.EnqueueEvent(ctx, "r", Builder("r", "x", i)); err != nil {
						t.Fatal(err)
					}
				}
				ops := &scriptedOps{writeErr: tc.write, syncErr: tc.sync, shortHalf: tc.half, from: from}
				sink := &reopening{path: filepath.Join(dir, "j.jsonl"), ops: ops}
				relay := outboxtest.NewRelay(t, s, sink, "r", outbox.WithBatchSize(batch), outbox.WithBackoff(time.Millisecond, 5*time.Millisecond))
				runCtx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- relay.Run(runCtx) }()
				outboxtest.WaitProjected(t, s, "r", n, 30*time.Second)
				stop()
				<-done
				s.Close()
				if ops.injected != 3 {
					t.Errorf("call %d: %d faults injected, want 3", from, ops.injected)
				}
				b, _ := os.ReadFile(sink.path)
				rep, err := Verify(bytes.NewReader(b))
				if err != nil || rep.TornTail || rep.Runs["r"].Last != n {
					t.Errorf("call %d: journal (%+v, %v)", from, rep, err)
				}
				if rep.Duplicates > batch {
					t.Errorf("call %d: %d duplicates, more than one batch", from, rep.Duplicates)
				}
				logs.mu.Lock()
				if logs.warns != 1 || logs.infos != 1 {
					t.Errorf("call %d: logged %d warnings and %d recoveries for one outage, want 1 and 1", from, logs.warns, logs.infos)
				}
				logs.mu.Unlock()
			}
		})
	}
}
