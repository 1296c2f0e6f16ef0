// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// segmentedConsumer writes a segmented journal of small segments, applies its first lines into a
// consumer database, then appends more: the consumer is behind.
func segmentedConsumer(t *testing.T) (dbPath, dir string) {
	t.Helper()
	ctx := context.Background()
	tmp := t.TempDir()
	dbPath, dir = filepath.Join(tmp, "consumer.db"), filepath.Join(tmp, "journal")
	j, err := journal.Open(dir, journal.WithSegmentSize(300))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	add := func(from, to int64) {
		for s := from; s <= to; s++ {
			if err := j.Append(ctx, "a", []outbox.EventLine{{Seq: s, Line: []byte(strings.TrimSuffix(jline("a", s, ""), "\n"))}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(1, 3)
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ApplyJournal(ctx, dir, func(context.Context, *sql.Tx, inbox.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	in.Close()
	add(4, 20)
	return dbPath, dir
}

func TestInboxStatsShowsAJournalSourcesPositionAndHowFarBehindTheJournalsEndItIs(t *testing.T) {
	dbPath, dir := segmentedConsumer(t)
	end, err := journalEnd(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := statsSource(t, "--db", dbPath)
	if got.Journal == nil || got.BehindBytes == nil || got.Journal.Position+*got.BehindBytes != end || got.Journal.Position == 0 {
		t.Fatalf("a journal source: %+v, want its position and %d minus it behind", got, end)
	}
	code, out, errOut := cli(t, "inbox", "stats", "--db", dbPath)
	if code != exitOK || !strings.Contains(out, "byte ") {
		t.Fatalf("inbox stats: exit %d, %q %q", code, out, errOut)
	}
}

func TestInboxAcceptRetentionGapRecordsTheDecisionAndTheConsumerGoesOnFromTheFirstRetainedSegment(t *testing.T) {
	ctx := context.Background()
	dbPath, dir := segmentedConsumer(t)
	names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	for _, n := range names[:2] {
		os.Remove(n)
		os.Remove(strings.TrimSuffix(n, ".jsonl") + ".idx")
	}
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	_, err = in.ApplyJournal(ctx, dir, func(context.Context, *sql.Tx, inbox.Event) error { return nil })
	in.Close()
	if !errors.Is(err, inbox.ErrRetentionGap) {
		t.Fatalf("ApplyJournal: %v, want a retention gap", err)
	}
	code, out, errOut := cli(t, "inbox", "accept-retention-gap", "--db", dbPath, "--journal", dir, "--reason", "trimmed under the cap")
	if code != exitOK || !strings.Contains(out, "given up") {
		t.Fatalf("accept-retention-gap: exit %d, %q %q", code, out, errOut)
	}
	code, _, errOut = cli(t, "inbox", "accept-retention-gap", "--db", dbPath, "--journal", dir, "--reason", "again")
	if code != exitFindings || !strings.Contains(errOut, "nothing changed") {
		t.Fatalf("a second accept-retention-gap: exit %d, %q", code, errOut)
	}
	in, err = inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := in.ApplyJournal(ctx, dir, func(context.Context, *sql.Tx, inbox.Event) error { return nil }); err != nil {
		t.Fatalf("ApplyJournal after the acceptance: %v", err)
	}
	if code, _, _ := cli(t, "inbox", "accept-retention-gap", "--db", dbPath, "--journal", dir); code != exitUsage {
		t.Fatalf("accept-retention-gap without a reason: exit %d", code)
	}
}

// A file source rewound by a Release reads the file its position named again from its start, then
// the path's file: inbox stats counts both, not only the file the path names now.
func TestInboxStatsCountsARewoundFileSourceFromTheStartOfTheFileItsPositionNamed(t *testing.T) {
	ctx := context.Background()
	dbPath, jPath := consumerDB(t)
	if err := os.Rename(jPath, jPath+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jPath, []byte(jline("a", 5, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Release(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	in.Close()
	old, _ := os.Stat(jPath + ".1")
	cur, _ := os.Stat(jPath)
	got := statsSource(t, "--db", dbPath)
	if want := old.Size() + cur.Size(); !got.Rewound || got.BehindBytes == nil || *got.BehindBytes != want {
		t.Fatalf("a rewound file source: %+v, want %d bytes behind", got, want)
	}
}
