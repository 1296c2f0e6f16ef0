package journal_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

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
