// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

// ledgerRow is what a raw read of a ledger row finds.
type ledgerRow struct {
	line, digest []byte
	digestNull   bool
	announceKey  string
	spill        int64
}

func readLedgerRow(t *testing.T, path, run string, seq int64) ledgerRow {
	t.Helper()
	return readLedgerRowOf(t, outboxtest.RawDB(t, path), run, seq)
}

// readLedgerRowOf is readLedgerRow over an open database, for a test that reads many rows.
func readLedgerRowOf(t *testing.T, d *sql.DB, run string, seq int64) ledgerRow {
	t.Helper()
	var r ledgerRow
	var digest []byte
	row := d.QueryRow(`SELECT line, digest IS NULL, COALESCE(digest, x''), announce_key, spill
		FROM events_outbox WHERE engine_run_id = ? AND seq = ? AND once_key <> ''`, run, seq)
	if err := row.Scan(&r.line, &r.digestNull, &digest, &r.announceKey, &r.spill); err != nil {
		t.Fatalf("ledger row %d of run %q: %v", seq, run, err)
	}
	r.digest = bytes.Clone(digest)
	return r
}

func countLargeLines(t *testing.T, path string) int {
	t.Helper()
	var n int
	if err := outboxtest.RawDB(t, path).QueryRow(`SELECT count(*) FROM events_lines`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestAProjectedOnceKeyedLineKeepsItsKeyAndDigestNotItsBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	_, seq, err := s.EnqueueOnce(ctx, "r", "unit:1", outboxtest.LineOf("done"))
	if err != nil || seq != 2 {
		t.Fatalf("EnqueueOnce: %d, %v", seq, err)
	}
	line := outboxtest.AllLines(t, s, "r")[1].Line
	// A relay that keeps what it projected: the row without a key stays, the ledger row shrinks.
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "r", outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r := readLedgerRow(t, path, "r", seq)
	if len(r.line) != 0 || r.digestNull || !bytes.Equal(r.digest, outbox.LineDigest(line)) || r.announceKey != "" {
		t.Errorf("ledger row after projection: line %q, digest %x (null %v), announce key %q; want no line and digest %x",
			r.line, r.digest, r.digestNull, r.announceKey, outbox.LineDigest(line))
	}
	if len(r.digest) != outbox.LineDigestSize {
		t.Errorf("digest of %d bytes, want %d", len(r.digest), outbox.LineDigestSize)
	}
	// The line before it, without a key, is stored whole until it is forgotten.
	if lines := outboxtest.AllLines(t, s, "r"); len(lines) != 1 || lines[0].Seq != 1 {
		t.Errorf("lines still stored: %v, want seq 1 only", outboxtest.SeqsOf(lines))
	}
}

func TestAKeyWhoseLineTheLedgerEmptiedIsNeverAnnouncedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	_, seq, _ := s.EnqueueOnce(ctx, "r", "unit:1", outboxtest.LineOf("done"))
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s = outboxtest.Reopen(t, s)
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "next").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := s.EnqueueOnce(ctx, "next", "unit:1", outboxtest.LineOf("done")); ok || err != nil {
		t.Errorf("EnqueueOnce of a key in the ledger: %v, %v; want refused", ok, err)
	}
	if ledger, _ := s.AnnouncedOnceKeys(ctx); !ledger["unit:1"] {
		t.Errorf("ledger: %v", ledger)
	}
	if n, _ := s.LedgerSize(ctx); n != 1 {
		t.Errorf("LedgerSize = %d, want 1", n)
	}
	// Marking it again with its own key is a no-op; with another, a conflict.
	if err := s.MarkAnnounced(ctx, "r", map[int64]string{seq: "unit:1"}); err != nil {
		t.Errorf("MarkAnnounced again: %v", err)
	}
	if err := s.MarkAnnounced(ctx, "r", map[int64]string{seq: "unit:2"}); !errors.Is(err, outbox.ErrAnnounceConflict) {
		t.Errorf("MarkAnnounced with another key: %v, want ErrAnnounceConflict", err)
	}
	if err := s.MarkAnnounced(ctx, "next", map[int64]string{1: "unit:1"}); err == nil {
		t.Error("MarkAnnounced of the key on another event succeeded")
	}
}

func TestALargeOnceKeyedLineLeavesNothingBehindOnceProjected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	big := []byte(fmt.Sprintf(`{"engine_run_id":"r","seq":1,"pad":%q}`, strings.Repeat("x", 4096)))
	if _, _, err := s.EnqueueOnce(ctx, "r", "unit:big", outboxtest.ConstLine(big)); err != nil {
		t.Fatal(err)
	}
	if n := countLargeLines(t, path); n != 1 {
		t.Fatalf("large lines stored: %d, want 1", n)
	}
	sink := outboxtest.NewMemSink()
	if err := outboxtest.FastRelay(t, s, sink, "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sink.All(); len(got) != 1 || !bytes.Equal(got[0].Line, big) {
		t.Fatalf("sink holds %d lines", len(got))
	}
	if n := countLargeLines(t, path); n != 0 {
		t.Errorf("large lines stored after projection: %d, want 0", n)
	}
	if r := readLedgerRow(t, path, "r", 1); r.spill != 0 || !bytes.Equal(r.digest, outbox.LineDigest(big)) {
		t.Errorf("ledger row: spill %d, digest %x", r.spill, r.digest)
	}
}

// oldBook makes a book at the version before the ledger kept digests, with what an earlier release
// left in it: run "old" with a ledger row every other seq up to 1301 (some lines large), projected up
// to 1300.
func oldBook(t *testing.T) (path string, lines map[int64][]byte) {
	t.Helper()
	return oldBookOf(t, 1301, 100)
}

// oldBookOf is oldBook with a ledger row every other seq up to last, the line of every largeEvery-th
// seq from 1 large, projected up to last-1.
func oldBookOf(t *testing.T, last, largeEvery int64) (path string, lines map[int64][]byte) {
	t.Helper()
	ctx := context.Background()
	path = filepath.Join(t.TempDir(), "book.db")
	d := outboxtest.RawDBRW(t, path)
	p, err := migrations.NewProvider(d)
	if err != nil {
		t.Fatal(err)
	}
	before := int64(0)
	for _, v := range migrations.Known() {
		if v < 6 {
			before = v
		}
	}
	if _, err := p.UpTo(ctx, before); err != nil {
		t.Fatal(err)
	}
	lines = map[int64][]byte{}
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= last; seq += 2 {
		line := []byte(fmt.Sprintf(`{"engine_run_id":"old","seq":%d,"type":"unit_done"}`, seq))
		spill := int64(0)
		if seq%largeEvery == 1 {
			line = []byte(fmt.Sprintf(`{"engine_run_id":"old","seq":%d,"pad":%q}`, seq, strings.Repeat("y", 1000)))
			res, err := tx.Exec(`INSERT INTO events_lines (line) VALUES (?)`, line)
			if err != nil {
				t.Fatal(err)
			}
			spill, _ = res.LastInsertId()
		}
		lines[seq] = line
		stored := line
		if spill != 0 {
			stored = []byte{}
		}
		key := fmt.Sprintf("unit:%d", seq)
		if _, err := tx.Exec(`INSERT INTO events_outbox (engine_run_id, seq, line, once_key, announce_key, spill)
			VALUES ('old', ?, ?, ?, ?, ?)`, seq, stored, key, key, spill); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(`INSERT INTO outbox_progress (engine_run_id, projected, last_seq) VALUES ('old', ?, ?)`, last-1, last); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	return path, lines
}

func TestRecoverReplacesTheLinesAnEarlierReleaseKeptInItsLedgerWithTheirDigests(t *testing.T) {
	t.Parallel()
	// Recover empties the rows in steps of a transaction each, which the operation timeout would
	// bound if the context had no deadline; what is under test is what they leave, not how fast.
	ctx := outboxtest.Patient(t)
	// Forty ledger rows, five of them with a large line, emptied sixteen a step: two whole steps and
	// a last one, as a book of any size is.
	const last = 81
	path, lines := oldBookOf(t, last, 20)
	s, err := outbox.Open(ctx, path, outbox.WithLedgerStep(16))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The migration itself converts nothing: the rows keep their lines until Recover.
	if r := readLedgerRow(t, path, "old", 1); !r.digestNull || r.spill == 0 {
		t.Fatalf("after the migration: digest %x (null %v), spill %d", r.digest, r.digestNull, r.spill)
	}
	sink := outboxtest.NewMemSink()
	if err := outboxtest.FastRelay(t, s, sink, "new").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	// One connection for every row: a connection opened a row would cost the test most of its time.
	d := outboxtest.RawDB(t, path)
	for seq, line := range lines {
		r := readLedgerRowOf(t, d, "old", seq)
		if len(r.line) != 0 || r.spill != 0 || !bytes.Equal(r.digest, outbox.LineDigest(line)) || r.announceKey != "" {
			t.Errorf("seq %d: line %q, spill %d, digest %x, announce key %q; want only the digest %x",
				seq, r.line, r.spill, r.digest, r.announceKey, outbox.LineDigest(line))
		}
	}
	if n := countLargeLines(t, path); n != 0 {
		t.Errorf("large lines left: %d", n)
	}
	if got := sink.All(); len(got) != 1 || got[0].Seq != last {
		t.Errorf("Recover sent %v, want seq %d (the first after the position)", outboxtest.SeqsOf(got), last)
	}
	if ok, _, _ := s.EnqueueOnce(ctx, "new", "unit:7", outboxtest.LineOf("done")); ok {
		t.Error("a converted key was announced again")
	}
}

func TestAPendingReadNeverGivesAnEmptiedLedgerLineAsALine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	for i := 0; i < 3; i++ {
		if _, _, err := s.EnqueueOnce(ctx, "r", fmt.Sprintf("unit:%d", i), outboxtest.LineOf("done")); err != nil {
			t.Fatal(err)
		}
	}
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Outside the protocol: the run's position lost, as a rollback of the schema past version 2
	// would lose it. The emptied rows are a hole the relay names, not lines it sends.
	s.Close()
	d := outboxtest.RawDBRW(t, path)
	if _, err := d.Exec(`DELETE FROM outbox_progress`); err != nil {
		t.Fatal(err)
	}
	d.Close()
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if lines, err := s.PendingEvents(ctx, "r", 0, 10); err != nil || len(lines) != 0 {
		t.Errorf("PendingEvents: %v, %v; want none", outboxtest.SeqsOf(lines), err)
	}
	sink := outboxtest.NewMemSink()
	if _, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("x")); err != nil {
		t.Fatal(err)
	}
	err = outboxtest.FastRelay(t, s, sink, "r").Flush(ctx)
	if !errors.Is(err, outbox.ErrRowsMissing) || len(sink.All()) != 0 {
		t.Errorf("Flush: %v, sent %v; want ErrRowsMissing and nothing sent", err, outboxtest.SeqsOf(sink.All()))
	}
}

func pragma(t *testing.T, path, name string) int64 {
	t.Helper()
	var n int64
	if err := outboxtest.RawDB(t, path).QueryRow("PRAGMA " + name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestANewBookGivesTheFreePagesItsForgetsLeaveBackToTheFileSystem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	if v := pragma(t, path, "auto_vacuum"); v != 2 {
		t.Fatalf("auto_vacuum = %d, want 2 (incremental)", v)
	}
	pad := strings.Repeat("z", 400)
	for i := 0; i < 40; i++ {
		builds := make([]outbox.EventBuilder, 500)
		for k := range builds {
			builds[k] = journal.Builder("old", "x", pad)
		}
		if _, err := s.EnqueueEvents(ctx, "old", builds); err != nil {
			t.Fatal(err)
		}
	}
	// Kept by the relay that projected them, the rows are forgotten by the next start's Recover.
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "old", outbox.WithForgetProjected(false)).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	full := pragma(t, path, "page_count")
	s = outboxtest.Reopen(t, s)
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "new").Recover(ctx); err != nil {
		t.Fatal(err)
	}
	free, pages := pragma(t, path, "freelist_count"), pragma(t, path, "page_count")
	if free > 256 {
		t.Errorf("%d free pages left after Recover forgot 20000 rows, want at most 256", free)
	}
	if pages > full/4 {
		t.Errorf("the book holds %d pages after forgetting, %d before: it did not shrink", pages, full)
	}
}

func TestARelayThatForgetsAsItGoesKeepsTheBookToWhatItHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	pad := strings.Repeat("z", 400)
	r := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "r", outbox.WithForgetProjected(true))
	for i := 0; i < 40; i++ {
		builds := make([]outbox.EventBuilder, 500)
		for k := range builds {
			builds[k] = journal.Builder("r", "x", pad)
		}
		if _, err := s.EnqueueEvents(ctx, "r", builds); err != nil {
			t.Fatal(err)
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if free := pragma(t, path, "freelist_count"); free > 256 {
			t.Fatalf("round %d: %d free pages, want at most 256", i, free)
		}
	}
}

func TestVacuumPutsABookCreatedBeforeInTheModeThatGivesPagesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Opening the old book and its first Recover only make the book Vacuum is given: on a loaded
	// machine they may outlast the default operation timeout, which is for the calls under test.
	setup := outboxtest.Patient(t)
	path, _ := oldBook(t)
	s, err := outbox.Open(setup, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := outboxtest.FastRelay(t, s, outboxtest.NewMemSink(), "new").Recover(setup); err != nil {
		t.Fatal(err)
	}
	if v := pragma(t, path, "auto_vacuum"); v != 0 {
		t.Fatalf("auto_vacuum of a book created before: %d, want 0", v)
	}
	before := pragma(t, path, "page_count")
	if _, err := s.Vacuum(ctx); err != nil {
		t.Fatal(err)
	}
	if v := pragma(t, path, "auto_vacuum"); v != 2 {
		t.Errorf("auto_vacuum after Vacuum: %d, want 2", v)
	}
	if pages := pragma(t, path, "page_count"); pages >= before || pragma(t, path, "freelist_count") != 0 {
		t.Errorf("after Vacuum: %d pages (%d before), %d free", pages, before, pragma(t, path, "freelist_count"))
	}
	// From then on its forgets give pages back, as a new book's do.
	pad := strings.Repeat("z", 400)
	for i := 0; i < 20; i++ {
		builds := make([]outbox.EventBuilder, 500)
		for k := range builds {
			builds[k] = journal.Builder("later", "x", pad)
		}
		if _, err := s.EnqueueEvents(setup, "later", builds); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ForgetEvents(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if free := pragma(t, path, "freelist_count"); free > 256+1024 {
		t.Errorf("%d free pages after forgetting 10000 rows, want at most a step beyond 256", free)
	}
	if ok, _, _ := s.EnqueueOnce(ctx, "new", "unit:1", outboxtest.LineOf("done")); ok {
		t.Error("a key was announced again after Vacuum")
	}
}

// A batch of once keys reached the sink and its record failed. The relay's next attempt records it,
// its once keys included, before it appends anything; a process that stops instead leaves it to the
// next start, whose Recover re-sends it, byte for byte, and moves its keys into the ledger, beside the
// runs of other earlier processes. Either way no key is announced again.
func TestAnUnrecordedBatchOfOnceKeysIsLedgeredByTheNextAttemptOrTheNextStart(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t, outbox.WithBusyTimeout(5*time.Millisecond))
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			for i := range 20 {
				key := fmt.Sprintf("unit-%d", i)
				if ok, _, err := s.EnqueueOnce(ctx, "run", key, journal.Builder("run", "done", key)); err != nil || !ok {
					t.Fatalf("EnqueueOnce %s: %v, %v", key, ok, err)
				}
			}
			for _, other := range []string{"other-a", "other-b"} {
				for range 7 {
					if _, err := s.EnqueueEvent(ctx, other, journal.Builder(other, "spend", 1)); err != nil {
						t.Fatal(err)
					}
				}
			}
			j := openJournal(t, path)
			var release func()
			sink := &hookedSink{sink: j, after: func(call int) {
				if call == 1 {
					release = holdWriteLock(t, s.Path())
				}
			}}
			r := outboxtest.NewRelay(t, s, sink, "run", outbox.WithBatchSize(10), outbox.WithFlushAttempts(1))
			if err := r.Flush(ctx); err == nil {
				t.Fatal("Flush with the write lock held: nil error")
			}
			if got := sink.calls; got != 1 {
				t.Fatalf("the sink was called %d times, want 1: nothing after the batch whose record failed", got)
			}
			release()
			wantDup := 0
			if restart {
				s = outboxtest.Reopen(t, s, outbox.WithBusyTimeout(time.Minute))
				if err := outboxtest.NewRelay(t, s, j, "next", outbox.WithBatchSize(4)).Recover(ctx); err != nil {
					t.Fatal(err)
				}
				wantDup = 10
			} else {
				if err := r.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if st := runStats(t, s, "run"); st.Projected != 20 || st.LedgerLines != 20 {
					t.Errorf("after the next attempt: projected %d, %d keys in the ledger; want 20 and 20", st.Projected, st.LedgerLines)
				}
				if err := outboxtest.NewRelay(t, s, j, "other-a").Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if err := outboxtest.NewRelay(t, s, j, "other-b").Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			v := verifyFile(t, path)
			if v.Lines != 34 || v.Runs["run"].Duplicates != wantDup {
				t.Errorf("the journal holds %d lines, run's with %d duplicates; want 34 and %d", v.Lines, v.Runs["run"].Duplicates, wantDup)
			}
			for i := range 20 {
				key := fmt.Sprintf("unit-%d", i)
				if ok, _, err := s.EnqueueOnce(ctx, "next", key, journal.Builder("next", "done", key)); err != nil || ok {
					t.Errorf("EnqueueOnce %s afterwards: announcing %v, %v; want false: it is in the journal", key, ok, err)
				}
			}
		})
	}
}
