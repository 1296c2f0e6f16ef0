// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// project enqueues n lines of run into the store at dbPath and relays them into the journal at
// jPath.
func project(t *testing.T, dbPath, jPath, run string, n int, word string) {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range n {
		if _, err := s.EnqueueEvent(ctx, run, journal.Builder(run, word, i)); err != nil {
			t.Fatal(err)
		}
	}
	if jPath == "" {
		return
	}
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := outboxtest.NewRelay(t, s, j, run).Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRelayOfAnotherBooksRunOfTheSameNameIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	jPath := filepath.Join(dir, "journal.jsonl")
	this, other := filepath.Join(dir, "this.db"), filepath.Join(dir, "other.db")
	project(t, this, jPath, "engine-1", 3, "this")
	project(t, this, jPath, "engine-2", 1, "this") // engine-1's lines are not the journal's last
	project(t, other, "", "engine-1", 3, "other")
	before := fileDigest(t, jPath)

	code, out, errOut := runOutbox(t, "relay", "--db", other, "--journal", jPath)
	// The journal holds a run the other book never recorded: the relay stops before it appends
	// anything, where it once stopped at engine-1's payload conflict.
	if code == exitOK || !strings.Contains(errOut, "the book is behind its sink") || !strings.Contains(errOut, "engine-2") {
		t.Errorf("relay of the other book: exit %d, stdout %q, stderr %q; want a failure naming the run the book lacks", code, out, errOut)
	}
	if fileDigest(t, jPath) != before {
		t.Error("the journal changed")
	}
	if code, out, errOut := runOutbox(t, "verify", jPath); code != exitOK {
		t.Errorf("verify after: exit %d\n%s%s", code, out, errOut)
	}
	s, err := outbox.OpenReadOnly(context.Background(), other)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs, err := collect(s.AllRuns(context.Background()))
	if err != nil || len(runs) != 1 || runs[0].Projected != 0 || runs[0].Lines != 3 {
		t.Errorf("the other book after: %+v (%v), want engine-1's 3 lines kept, none projected", runs, err)
	}
}

// longLines adds two lines of 1.5 MB of a run of their own after the journal's lines, projected from
// the book, so that the book knows the run (a run it did not know would stop the relay at its start:
// outbox.ErrBookBehind).
func longLines(t *testing.T, dbPath, jPath string) {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 {
		if _, err := s.EnqueueEvent(ctx, "big", journal.Builder("big", "x", strings.Repeat("l", 1_500_000))); err != nil {
			t.Fatal(err)
		}
	}
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := outboxtest.NewRelay(t, s, j, "big").Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestRelayFinishesOnAJournalWithLongLines(t *testing.T) {
	t.Parallel()
	dbPath, jPath := book(t)
	longLines(t, dbPath, jPath)
	code, out, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", jPath)
	if code != exitOK || !strings.Contains(out, "projected 3 lines") {
		t.Fatalf("relay: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := runOutbox(t, "verify", jPath); code != exitOK {
		t.Errorf("verify after: exit %d\n%s%s", code, out, errOut)
	}
}

func TestRelayEndsOnSIGTERMAndLeavesTheJournalWhole(t *testing.T) {
	t.Parallel()
	dbPath, jPath := book(t)
	longLines(t, dbPath, jPath)
	cmd := outboxCmd(t, "relay", "--db", dbPath, "--journal", jPath)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(100 * time.Millisecond) // not a bound: the signal may find the relay at any step, or done
	cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute): // a liveness bound, far above what the relay takes
		cmd.Process.Kill()
		<-done
		t.Fatalf("relay went on after SIGTERM\n%s", errOut.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	switch code := cmd.ProcessState.ExitCode(); {
	case code == exitOK && strings.Contains(out.String(), "projected 3 lines"):
	case code == exitUsage && strings.Contains(errOut.String(), "context canceled"):
	case code == -1: // the signal came before the command listened for it
	default:
		t.Errorf("relay after SIGTERM: exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	if code, out, errOut := runOutbox(t, "verify", jPath); code != exitOK {
		t.Errorf("verify after: exit %d\n%s%s", code, out, errOut)
	}
}

func TestOpenContinuingStopsReadingTheJournalWhenTheCommandIsInterrupted(t *testing.T) {
	t.Parallel()
	dbPath, jPath := book(t)
	longLines(t, dbPath, jPath)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if j, err := openContinuing(ctx, jPath, []outbox.RunStats{{RunID: "old", Projected: 2}}); !errors.Is(err, context.Canceled) {
		if err == nil {
			j.Close()
		}
		t.Fatalf("openContinuing with its context done: %v, want context.Canceled", err)
	}
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatalf("the journal after: %v", err)
	}
	j.Close()
}
