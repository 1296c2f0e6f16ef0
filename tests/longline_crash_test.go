// SPDX-License-Identifier: Apache-2.0

package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// longLineSize is the data of the book's last line: half a MiB past the journal's read chunk.
const longLineSize = 3 << 19

// longLineEngine writes a book whose last line is 1.5 MiB and projects it, killed (crashtest.KillAt)
// after the journal has the batch and before its record.
func longLineEngine() int {
	crashtest.ArmFromEnv()
	ctx := context.Background()
	run := os.Getenv("RUN")
	s, err := outbox.Open(ctx, os.Getenv("DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 1
	}
	defer s.Close()
	j, err := journal.OpenFile(os.Getenv("JOURNAL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 1
	}
	defer j.Close()
	builds := []outbox.EventBuilder{journal.Handshake(run, nil), journal.Builder(run, "small", 1),
		journal.Builder(run, "small", 2), journal.Builder(run, "long", strings.Repeat("l", longLineSize))}
	if _, err := s.EnqueueEvents(ctx, run, builds); err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 1
	}
	relay, err := outbox.NewRelay(s, j, run)
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 1
	}
	if err := relay.Flush(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 1
	}
	return 0
}

// recoveringEngine is the next start: it recovers what earlier runs left, and exits.
func recoveringEngine() int {
	ctx := context.Background()
	s, err := outbox.Open(ctx, os.Getenv("DB"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "recover:", err)
		return 1
	}
	defer s.Close()
	j, err := journal.OpenFile(os.Getenv("JOURNAL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "recover:", err)
		return 1
	}
	defer j.Close()
	relay, err := outbox.NewRelay(s, j, os.Getenv("RUN"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "recover:", err)
		return 1
	}
	if err := relay.Recover(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "recover:", err)
		return 1
	}
	return 0
}

// TestACrashAfterAppendingALongLastLineIsRecoveredByTheNextStart: the next start's Recover once
// spun for ever on a journal whose last line is a MiB or longer, reading it back. It returns, and the
// journal holds every line once, the in-flight batch re-sent byte for byte.
func TestACrashAfterAppendingALongLastLineIsRecoveredByTheNextStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, jpath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	env := []string{"DB=" + db, "JOURNAL=" + jpath}
	err := crashtest.Child(t, "long-line-engine", append(env, append([]string{"RUN=engine-1"},
		crashtest.KillAt(faultpoint.RelayAfterAppend, 1)...)...)...).Run()
	if !crashtest.Killed(err) {
		t.Fatalf("the engine was not killed after the append: %v", err)
	}
	recov := crashtest.Child(t, "recovering-engine", append(env, "RUN=engine-2")...)
	if err := recov.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- recov.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the next start's Recover: %v", err)
		}
	case <-time.After(2 * time.Minute): // a liveness bound, far above the seconds it takes
		recov.Process.Kill()
		<-done
		t.Fatal("the next start's Recover did not return")
	}

	f, err := os.Open(jpath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if r := rep.Runs["engine-1"]; r.Last != 4 || r.Lines != 4 || r.Duplicates != 4 || len(rep.Runs) != 1 || rep.TornTail {
		t.Errorf("the journal holds %+v, want engine-1's 4 lines and the re-sent batch of 4", rep)
	}
	if st, err := f.Stat(); err != nil || st.Size() < 2*longLineSize {
		t.Errorf("the journal is %v bytes (%v): the long line is not there twice", st.Size(), err)
	}
	s, err := outbox.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for r, err := range s.AllRuns(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if r.RunID == "engine-1" && (r.Projected != 4 || r.Pending != 0) {
			t.Errorf("after Recover the book says %+v", r)
		}
	}
}
