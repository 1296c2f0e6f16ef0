// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/textmachine/outbox/internal/testing/dirstate"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
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

func TestRelayDrainsAStoppedEnginesBacklog(t *testing.T) {
	dbPath, jPath := book(t)
	code, out, errOut := cli(t, "relay", "--db", dbPath, "--journal", jPath)
	if code != exitOK || !strings.Contains(out, "projected 3 lines") {
		t.Fatalf("relay: %d %q %q", code, out, errOut)
	}
	f, _ := os.Open(jPath)
	rep, err := journal.Verify(f)
	f.Close()
	if err != nil || rep.Runs["dead"].Last != 3 || rep.Runs["old"].Last != 2 {
		t.Errorf("journal after relay: %+v %v", rep, err)
	}
	s, _ := outbox.OpenReadOnly(context.Background(), dbPath)
	defer s.Close()
	if ledger, _ := s.AnnouncedOnceKeys(context.Background()); !ledger["unit_done:1"] {
		t.Error("the relayed once key is not in the ledger")
	}
	// A second relay has nothing left to send.
	if code, out, _ := cli(t, "relay", "--db", dbPath, "--journal", jPath); code != exitOK || !strings.Contains(out, "projected 0 lines") {
		t.Errorf("second relay: %d %q", code, out)
	}
}

func TestRelayRefusesALockedDatabaseOrJournal(t *testing.T) {
	dbPath, jPath := book(t)
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli(t, "relay", "--db", dbPath, "--journal", jPath)
	j.Close()
	if code != exitUsage || !strings.Contains(errOut, "locked") {
		t.Errorf("locked journal: %d %q", code, errOut)
	}
	s, _ := outbox.Open(context.Background(), dbPath)
	code, _, errOut = cli(t, "relay", "--db", dbPath, "--journal", jPath)
	s.Close()
	if code != exitUsage || !strings.Contains(errOut, "engine running") {
		t.Errorf("locked database: %d %q", code, errOut)
	}
}

func TestRelayDrawsABarOnATerminalAndPlainCountsElsewhere(t *testing.T) {
	var tty bytes.Buffer
	p := &progress{w: &tty, total: 10, tty: true}
	p.add(5)
	p.add(5)
	p.done()
	if out := tty.String(); !strings.Contains(out, "\r[####################                    ] 5/10 lines") ||
		!strings.Contains(out, "] 10/10 lines\n") {
		t.Errorf("terminal output %q", out)
	}
	var plain bytes.Buffer
	p = newProgress(&plain, 10) // a buffer is not a terminal
	p.add(4)
	p.add(6)
	p.done()
	if out := plain.String(); strings.Contains(out, "\r") || !strings.HasSuffix(out, "projected 10/10 lines\n") {
		t.Errorf("plain output %q", out)
	}
}

// SIGINT while `outbox relay` drains a backlog, three times at different points, then a relay to the
// end: the journal holds every line once. The interrupted relay records the batch the journal already
// has before it exits, so a clean shutdown re-sends nothing; before, each interrupt during an append
// dropped the record and the next relay sent that batch again.
func TestRelayInterruptedBySIGINTReSendsNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	const backlog = 30000
	for i := 0; i < backlog; i += 1000 {
		builds := make([]outbox.EventBuilder, 1000)
		for k := range builds {
			builds[k] = journal.Builder("dead", "spend", map[string]int{"i": i + k})
		}
		if _, err := s.EnqueueEvents(ctx, "dead", builds); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		before := int64(0)
		if st, err := os.Stat(jPath); err == nil {
			before = st.Size()
		}
		cmd := outboxCmd(t, "relay", "--db", dbPath, "--journal", jPath)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Interrupted once the journal has grown: in the middle of the drain, often in an append.
		for {
			if st, err := os.Stat(jPath); err == nil && st.Size() > before {
				break
			}
			time.Sleep(time.Millisecond)
		}
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil && cmd.ProcessState.ExitCode() == 0 {
			t.Fatalf("round %d: %v", round, err)
		}
	}
	if code, out, errOut := cli(t, "relay", "--db", dbPath, "--journal", jPath); code != exitOK {
		t.Fatalf("the last relay: %d %q %q", code, out, errOut)
	}
	f, err := os.Open(jPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil || rep.Lines != backlog || rep.Duplicates != 0 {
		t.Fatalf("the journal after three interrupts: %d lines, %d duplicates, %v; want %d lines, none twice",
			rep.Lines, rep.Duplicates, err, backlog)
	}
}

func TestRelayWritesOnlyIntoAJournalThatContinuesTheDatabase(t *testing.T) {
	dbPath, _ := book(t) // run "old" is projected up to 2
	dir := t.TempDir()
	otherDB := filepath.Join(dir, "other.db")
	s, err := outbox.Open(context.Background(), otherDB)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	otherJournal := `{"engine_run_id":"x","seq":1}` + "\n" + `{"engine_run_id":"x","seq":2}` + "\n"
	for _, tc := range []struct {
		name, content, says string
	}{
		{"a SQLite database", "", "not a journal"},
		{"a text file", "dear diary\nno newline at the end", "not a journal"},
		{"a binary file", string(binary), "not a journal"},
		{"an empty file", "", `holds run old up to seq 0, but the database records it projected up to seq 2`},
		{"a new file", "", `holds run old up to seq 0, but the database records it projected up to seq 2`},
		{"another book's journal", otherJournal, `holds run old up to seq 0, but the database records it projected up to seq 2`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			switch tc.name {
			case "a SQLite database":
				target = otherDB
			case "a new file":
			default:
				if err := os.WriteFile(target, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before, beforeDB := dirstate.Snapshot(t, dir), contents(t, dbPath)
			code, out, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", target)
			if code != exitUsage || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.says) {
				t.Errorf("relay into %s: exit %d, stdout %q, stderr %q; want 2 and one line saying %q", tc.name, code, out, errOut, tc.says)
			}
			if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
				t.Errorf("the journal's directory changed (-before +after):\n%s", diff)
			}
			if diff := cmp.Diff(beforeDB, contents(t, dbPath)); diff != "" {
				t.Errorf("the database changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestRelayRefusesAJournalThatLacksARunWhoseRowsAreAllForgotten(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dbPath, jPath := filepath.Join(dir, "book.db"), filepath.Join(dir, "journal.jsonl")
	s, err := outbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.OpenFile(jPath)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.EnqueueEvent(ctx, "old", journal.Builder("old", "x", i)); err != nil {
			t.Fatal(err)
		}
	}
	relay, err := outbox.NewRelay(s, j, "old", outbox.WithForgetProjected(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	j.Close()
	s.Close()
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runOutbox(t, "relay", "--db", dbPath, "--journal", empty)
	if want := "holds run old up to seq 0, but the database records it projected up to seq 3"; code != exitUsage || out != "" || !strings.Contains(errOut, want) {
		t.Errorf("relay into an empty file: exit %d, stdout %q, stderr %q; want 2 and %q", code, out, errOut, want)
	}
}

// contents is what the database holds, read through the library: every run's figures and lines.
func contents(t *testing.T, dbPath string) string {
	t.Helper()
	ctx := context.Background()
	s, err := outbox.OpenReadOnly(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs, err := collect(s.AllRuns(ctx))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "%q last %d lines %d projected %d\n", r.RunID, r.LastSeq, r.Lines, r.Projected)
		lines, err := s.PendingEvents(ctx, r.RunID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			fmt.Fprintf(&b, "%d %s\n", l.Seq, l.Line)
		}
	}
	keys, err := s.AnnouncedOnceKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "ledger %d\n", len(keys))
	return b.String()
}
