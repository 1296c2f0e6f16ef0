// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

func TestCheckLinePassesABuildersLineForItsOwnKeyOnly(t *testing.T) {
	t.Parallel()
	line, err := journal.Builder("r", "spend", map[string]int{"cents": 5})(7)
	if err != nil {
		t.Fatal(err)
	}
	if err := journal.CheckLine("r", 7, line); err != nil {
		t.Errorf("its own key: %v", err)
	}
	for _, c := range []struct {
		name string
		run  string
		seq  int64
		line []byte
	}{
		{"another seq", "r", 8, line},
		{"another run", "s", 7, line},
		{"not JSON", "r", 7, []byte(`{"engine_run_id":"r","seq":7`)},
		{"not an object", "r", 7, []byte(`["r",7]`)},
		{"no seq", "r", 7, []byte(`{"engine_run_id":"r"}`)},
		{"a fraction", "r", 7, []byte(`{"engine_run_id":"r","seq":7.0}`)},
		{"empty", "r", 7, nil},
		{"too long", "r", 7, []byte(`{"engine_run_id":"r","seq":7,"x":"` + strings.Repeat("a", outbox.DefaultMaxLineSize) + `"}`)},
	} {
		if err := journal.CheckLine(c.run, c.seq, c.line); err == nil {
			t.Errorf("%s: passed", c.name)
		}
	}
}

func TestHandshakeFailsAndStoresNothingWhenItsSeqIsNotOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if seq, err := s.EnqueueEvent(ctx, "r", journal.Handshake("r", nil)); err != nil || seq != 1 {
		t.Fatalf("first handshake: %d, %v", seq, err)
	}
	// The run id used again, by a process that did not check it was fresh.
	if seq, err := s.EnqueueEvent(ctx, "r", journal.Handshake("r", nil)); err == nil || seq != 0 {
		t.Fatalf("second handshake: %d, %v; want an error", seq, err)
	}
	if lines, err := s.PendingEvents(ctx, "r", 0, 10); err != nil || len(lines) != 1 {
		t.Fatalf("stored %d lines, %v; want 1", len(lines), err)
	}
	if _, err := journal.Handshake("r", nil)(2); err == nil || !strings.Contains(err.Error(), "not 1") {
		t.Errorf("the builder given seq 2: %v", err)
	}
	if _, err := journal.Handshake("r", nil)(1); errors.Unwrap(err) != nil {
		t.Errorf("the builder given seq 1: %v", err)
	}
}

func TestARetiredLineIsTheLineBuilderRendersForItsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := outbox.Open(ctx, filepath.Join(t.TempDir(), "book.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) { return []byte(`{"seq":5}`), nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.RetireEvent(ctx, "r", 1, `a <bad> "line" & more`); err != nil {
		t.Fatal(err)
	}
	lines, err := s.PendingEvents(ctx, "r", 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := lines[0].Line
	var parsed struct {
		At string `json:"at"`
	}
	if err := json.Unmarshal(got, &parsed); err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(journal.TimeFormat, parsed.At)
	if err != nil || at.UTC().Format(journal.TimeFormat) != parsed.At {
		t.Fatalf("at %q is not in journal.TimeFormat: %v", parsed.At, err)
	}
	sum := sha256.Sum256([]byte(`{"seq":5}`))
	want, err := journal.Builder("r", "retired", map[string]any{
		"reason": `a <bad> "line" & more`, "sha256": hex.EncodeToString(sum[:]), "size": 9})(1)
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		At string `json:"at"`
	}
	json.Unmarshal(want, &w)
	want = bytes.Replace(want, []byte(w.At), []byte(parsed.At), 1)
	if !bytes.Equal(got, want) {
		t.Errorf("tombstone\n%s\nwant\n%s", got, want)
	}
	if err := journal.CheckLine("r", 1, got); err != nil {
		t.Error(err)
	}
}
