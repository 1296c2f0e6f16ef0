// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

type tombstone struct {
	RunID string `json:"engine_run_id"`
	Seq   int64  `json:"seq"`
	Type  string `json:"type"`
	At    string `json:"at"`
	Data  struct {
		OnceKey string `json:"once_key"`
		Reason  string `json:"reason"`
		SHA256  string `json:"sha256"`
		Size    int    `json:"size"`
	} `json:"data"`
}

func TestRetireEventReplacesARefusedLineWithATombstoneAndTheRunProjectsOnWithoutAGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	jpath := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := journal.OpenFile(jpath)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, b := range []outbox.EventBuilder{journal.Builder("r", "a", nil), wrongSeq("r"), journal.Builder("r", "c", nil)} {
		if _, err := s.EnqueueEvent(ctx, "r", b); err != nil {
			t.Fatal(err)
		}
	}
	relay := outboxtest.NewRelay(t, s, j, "r", outbox.WithForgetProjected(false))
	if err := relay.Flush(ctx); !errors.Is(err, outbox.ErrSinkRefused) {
		t.Fatalf("Flush: %v; want the refusal", err)
	}
	stored, err := s.PendingEvents(ctx, "r", 1, 1)
	if err != nil || len(stored) != 1 {
		t.Fatal(stored, err)
	}
	original := stored[0].Line
	if err := s.RetireEvent(ctx, "r", 2, "rendered with the wrong seq"); err != nil {
		t.Fatalf("RetireEvent: %v", err)
	}
	if err := relay.Flush(ctx); err != nil {
		t.Fatalf("Flush after the retirement: %v", err)
	}
	f, err := os.Open(jpath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := journal.Verify(f)
	if err != nil || rep.Runs["r"].Last != 3 || rep.Lines != 3 {
		t.Fatalf("journal: %+v, %v; want run r whole, 1 to 3", rep, err)
	}
	b, _ := os.ReadFile(jpath)
	var tomb tombstone
	if err := json.Unmarshal([]byte(strings.Split(string(b), "\n")[1]), &tomb); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(original)
	if tomb.RunID != "r" || tomb.Seq != 2 || tomb.Type != "retired" || tomb.Data.Reason != "rendered with the wrong seq" ||
		tomb.Data.SHA256 != hex.EncodeToString(sum[:]) || tomb.Data.Size != len(original) {
		t.Errorf("tombstone %+v; want the reason and the SHA-256 and size of %q", tomb, original)
	}
	if st := runStats(t, s, "r"); st.StoppedSeq != 0 || st.Projected != 3 {
		t.Errorf("after projecting: %+v; want not stopped, projected to 3", st)
	}
}

func TestRetireEventRefusesALineAlreadyProjectedOrMissingAndChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	sink := outboxtest.NewMemSink()
	for range 2 {
		if _, err := s.EnqueueEvent(ctx, "r", journal.Builder("r", "a", nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := outboxtest.NewRelay(t, s, sink, "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, "r", journal.Builder("r", "a", nil)); err != nil {
		t.Fatal(err)
	}
	before, _ := s.PendingEvents(ctx, "r", 0, 10)
	for _, c := range []struct {
		seq    int64
		reason string
		want   error
	}{
		{1, "x", outbox.ErrProjected},
		{2, "x", outbox.ErrProjected},
		{4, "x", outbox.ErrUnknownEvent},
	} {
		if err := s.RetireEvent(ctx, "r", c.seq, c.reason); !errors.Is(err, c.want) {
			t.Errorf("seq %d: %v; want %v", c.seq, err, c.want)
		}
	}
	for _, reason := range []string{"", "\xff", strings.Repeat("x", outbox.MaxRetireReasonLen+1)} {
		if err := s.RetireEvent(ctx, "r", 3, reason); err == nil {
			t.Errorf("reason %q accepted", reason)
		}
	}
	for _, run := range []string{"", "a\x00b"} {
		if err := s.RetireEvent(ctx, run, 3, "x"); !errors.Is(err, outbox.ErrInvalidRunID) {
			t.Errorf("run %q: %v", run, err)
		}
	}
	if err := s.RetireEvent(ctx, "r", 0, "x"); err == nil {
		t.Error("seq 0 accepted")
	}
	after, _ := s.PendingEvents(ctx, "r", 0, 10)
	if len(after) != len(before) {
		t.Fatalf("%d lines before, %d after", len(before), len(after))
	}
	for i := range before {
		if string(before[i].Line) != string(after[i].Line) {
			t.Errorf("line %d changed: %q to %q", before[i].Seq, before[i].Line, after[i].Line)
		}
	}
}

func TestRetiringALineThatAnnouncedAOnceKeyFreesTheKeyAndTheTombstoneNamesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := outboxtest.Setup(t)
	if _, _, err := s.EnqueueOnce(ctx, "r", "unit:1", wrongSeq("r")); err != nil {
		t.Fatal(err)
	}
	if err := s.RetireEvent(ctx, "r", 1, "bad"); err != nil {
		t.Fatal(err)
	}
	lines, _ := s.PendingEvents(ctx, "r", 0, 1)
	var tomb tombstone
	if err := json.Unmarshal(lines[0].Line, &tomb); err != nil || tomb.Data.OnceKey != "unit:1" {
		t.Fatalf("tombstone %s, %v; want it to name the once key", lines[0].Line, err)
	}
	if ok, seq, err := s.EnqueueOnce(ctx, "r", "unit:1", journal.Builder("r", "done", nil)); !ok || seq != 2 || err != nil {
		t.Fatalf("the key again: %v %d %v; want it announced at seq 2", ok, seq, err)
	}
	sink := outboxtest.NewMemSink()
	if err := outboxtest.NewRelay(t, s, sink, "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.LedgerSize(ctx); n != 1 || err != nil {
		t.Errorf("ledger: %d keys, %v; want 1", n, err)
	}
}

func TestRetiringALargeLineLeavesNothingOfIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	big := []byte(`{"engine_run_id":"r","seq":9,"pad":"` + strings.Repeat("x", 100_000) + `"}`)
	if _, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine(big)); err != nil {
		t.Fatal(err)
	}
	if err := s.RetireEvent(ctx, "r", 1, "wrong seq"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := outboxtest.RawDB(t, path).QueryRow(`SELECT count(*) FROM events_lines`).Scan(&n); err != nil || n != 0 {
		t.Errorf("events_lines keeps %d lines, %v", n, err)
	}
	lines, _ := s.PendingEvents(ctx, "r", 0, 1)
	if err := journal.CheckLine("r", 1, lines[0].Line); err != nil {
		t.Errorf("the tombstone is not a journal line of its key: %v", err)
	}
	var tomb tombstone
	json.Unmarshal(lines[0].Line, &tomb)
	if tomb.Data.Size != len(big) {
		t.Errorf("tombstone size %d, want %d", tomb.Data.Size, len(big))
	}
}

func TestRetireEventWithAnEndedContextChangesNothing(t *testing.T) {
	t.Parallel()
	s, _ := outboxtest.Setup(t)
	if _, err := s.EnqueueEvent(context.Background(), "r", wrongSeq("r")); err != nil {
		t.Fatal(err)
	}
	before, _ := s.PendingEvents(context.Background(), "r", 0, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.RetireEvent(ctx, "r", 1, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("RetireEvent with a cancelled context: %v", err)
	}
	after, _ := s.PendingEvents(context.Background(), "r", 0, 1)
	if string(before[0].Line) != string(after[0].Line) {
		t.Fatalf("the line changed: %q to %q", before[0].Line, after[0].Line)
	}
	if err := s.RetireEvent(context.Background(), "r", 1, "x"); err != nil {
		t.Fatalf("the store is not usable after: %v", err)
	}
}
