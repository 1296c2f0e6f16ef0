// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// TestEveryWriteMethodRefusesBadInputAndStoresNothing runs each public write method with an empty
// run id, a nil builder or function, and a cancelled context, on an open store; each gets an error
// and the database is unchanged.
func TestEveryWriteMethodRefusesBadInputAndStoresNothing(t *testing.T) {
	t.Parallel()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	calls := map[string]func() error{
		"EnqueueEvent empty run":   func() error { _, err := s.EnqueueEvent(ctx, "", outboxtest.LineOf("x")); return err },
		"EnqueueEvent nil builder": func() error { _, err := s.EnqueueEvent(ctx, "r", nil); return err },
		"EnqueueEvent cancelled":   func() error { _, err := s.EnqueueEvent(cancelled, "r", outboxtest.LineOf("x")); return err },
		"EnqueueOnce empty key":    func() error { _, _, err := s.EnqueueOnce(ctx, "r", "", outboxtest.LineOf("x")); return err },
		"EnqueueOnce nil builder":  func() error { _, _, err := s.EnqueueOnce(ctx, "r", "k", nil); return err },
		"EnqueueOnce cancelled":    func() error { _, _, err := s.EnqueueOnce(cancelled, "r", "k", outboxtest.LineOf("x")); return err },
		"EnqueueEvents empty run": func() error {
			_, err := s.EnqueueEvents(ctx, "", []outbox.EventBuilder{outboxtest.LineOf("x")})
			return err
		},
		"EnqueueEvents nil builder": func() error {
			_, err := s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{outboxtest.LineOf("x"), nil})
			return err
		},
		"EnqueueEvents cancelled": func() error {
			_, err := s.EnqueueEvents(cancelled, "r", []outbox.EventBuilder{outboxtest.LineOf("x")})
			return err
		},
		"EnqueueTx nil tx":            func() error { _, err := s.EnqueueTx(ctx, nil, "r", outboxtest.LineOf("x")); return err },
		"WriteTx nil function":        func() error { return s.WriteTx(ctx, nil) },
		"WriteTx cancelled":           func() error { return s.WriteTx(cancelled, func(*sql.Tx) error { return nil }) },
		"MarkAnnounced empty run":     func() error { return s.MarkAnnounced(ctx, "", map[int64]string{1: "k"}) },
		"MarkAnnounced empty key":     func() error { return s.MarkAnnounced(ctx, "r", map[int64]string{1: ""}) },
		"MarkAnnounced cancelled":     func() error { return s.MarkAnnounced(cancelled, "r", map[int64]string{1: "k"}) },
		"ForgetEvents empty run":      func() error { _, err := s.ForgetEvents(ctx, ""); return err },
		"ForgetEvents cancelled":      func() error { _, err := s.ForgetEvents(cancelled, "other"); return err },
		"PendingEvents empty run":     func() error { _, err := s.PendingEvents(ctx, "", 0, 1); return err },
		"PendingEvents zero limit":    func() error { _, err := s.PendingEvents(ctx, "r", 0, 0); return err },
		"PendingEvents cancelled":     func() error { _, err := s.PendingEvents(cancelled, "r", 0, 1); return err },
		"EventsUsed empty run":        func() error { _, err := s.EventsUsed(ctx, ""); return err },
		"Projected empty run":         func() error { _, err := s.Projected(ctx, ""); return err },
		"AnnouncedOnceKeys cancelled": func() error { _, err := s.AnnouncedOnceKeys(cancelled); return err },
	}
	for name, call := range calls {
		if err := call(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if diff := cmp.Diff([]int64{1}, outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r"))); diff != "" {
		t.Errorf("rows changed (-want +got):\n%s", diff)
	}
	if n := outboxtest.CountRows(t, path, "1"); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
	if got := outboxtest.MustEnqueue(t, s, "r"); got != 2 {
		t.Errorf("next seq = %d, want 2: no number was consumed", got)
	}
}

// TestCloseDuringConcurrentCallsLeavesOnlyWhatWasAcknowledged closes a store while goroutines enqueue:
// every call either returns a seq (and that line is stored) or fails, with ErrClosed once the store is
// closed; nothing panics, and the database reopens with exactly the acknowledged lines, dense.
func TestCloseDuringConcurrentCallsLeavesOnlyWhatWasAcknowledged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[int64]bool{}
	start := make(chan struct{})
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < 200; i++ {
				seq, err := s.EnqueueEvent(context.Background(), "r", outboxtest.LineOf("x"))
				if err != nil {
					if !errors.Is(err, outbox.ErrClosed) {
						t.Errorf("enqueue during Close: %v", err)
					}
					return
				}
				mu.Lock()
				acked[seq] = true
				mu.Unlock()
			}
		}()
	}
	close(start)
	for {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 50 {
			break
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s2, err := outbox.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("reopen after Close: %v (the lock was not released?)", err)
	}
	defer s2.Close()
	stored := outboxtest.SeqsOf(outboxtest.AllLines(t, s2, "r"))
	if diff := cmp.Diff(outboxtest.SeqRange(1, int64(len(acked))), stored); diff != "" {
		t.Errorf("stored lines are not exactly the %d acknowledged, dense (-want +got):\n%s", len(acked), diff)
	}
}

// TestALineAtTheLimitGoesThroughTheStoreTheJournalAndTheVerifier: a line of exactly the default
// limit is stored, projected and verified byte for byte; one byte more is refused before it is stored,
// naming both sizes, and uses no number.
func TestALineAtTheLimitGoesThroughTheStoreTheJournalAndTheVerifier(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 16 MiB several times")
	}
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	head, tail := `{"engine_run_id":"r","seq":1,"data":"`, `"}`
	big := append([]byte(head), bytes.Repeat([]byte("é"), (outbox.DefaultMaxLineSize-len(head)-len(tail))/2)...)
	for len(big) < outbox.DefaultMaxLineSize-len(tail) {
		big = append(big, 'x')
	}
	big = append(big, tail...)
	if len(big) != outbox.DefaultMaxLineSize {
		t.Fatalf("line of %d bytes", len(big))
	}
	over := append(append([]byte(head), 'x'), big[len(head):]...)
	_, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine(over))
	if !errors.Is(err, outbox.ErrInvalidLine) || !strings.Contains(err.Error(), fmt.Sprint(len(over))) ||
		!strings.Contains(err.Error(), fmt.Sprint(outbox.DefaultMaxLineSize)) {
		t.Errorf("a line one byte over the limit: %v, want ErrInvalidLine naming both sizes", err)
	}
	if seq, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine(big)); err != nil || seq != 1 {
		t.Fatalf("a line at the limit: (%d, %v), want seq 1", seq, err)
	}
	jpath := filepath.Join(t.TempDir(), "j.jsonl")
	j, err := journal.OpenFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.NewRelay(t, s, j, "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	j.Close()
	f, _ := os.Open(jpath)
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil || rep.Runs["r"].Last != 1 {
		t.Errorf("Verify: (%+v, %v)", rep, err)
	}
	got, _ := os.ReadFile(jpath)
	if !bytes.Equal(got[:len(got)-1], big) {
		t.Error("the journal's line differs from the stored one")
	}
}
