// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
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

func TestRunIDsAndOnceKeysMustBeWellFormed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	badRuns := map[string]string{
		"empty":             "",
		"invalid UTF-8 ff":  "run\xff",
		"invalid UTF-8 fe":  "run\xfe",
		"NUL":               "run\x00",
		"newline":           "run\n",
		"escape":            "run\x1b[2J",
		"DEL":               "run\x7f",
		"257 bytes":         strings.Repeat("r", outbox.MaxRunIDLen+1),
		"truncated UTF-8":   "run\xc3",
		"surrogate in UTF8": "run\xed\xa0\x80",
	}
	for name, run := range badRuns {
		calls := map[string]error{}
		_, calls["EnqueueEvent"] = s.EnqueueEvent(ctx, run, outboxtest.LineOf("x"))
		_, _, calls["EnqueueOnce"] = s.EnqueueOnce(ctx, run, "k", outboxtest.LineOf("x"))
		_, calls["EnqueueEvents"] = s.EnqueueEvents(ctx, run, []outbox.EventBuilder{outboxtest.LineOf("x")})
		calls["WriteTx+EnqueueTx"] = s.WriteTx(ctx, func(tx *sql.Tx) error { _, err := s.EnqueueTx(ctx, tx, run, outboxtest.LineOf("x")); return err })
		calls["MarkAnnounced"] = s.MarkAnnounced(ctx, run, map[int64]string{1: "k"})
		_, calls["PendingEvents"] = s.PendingEvents(ctx, run, 0, 1)
		_, calls["ForgetEvents"] = s.ForgetEvents(ctx, run)
		_, calls["NewRelay"] = outbox.NewRelay(s, outboxtest.NewMemSink(), run)
		for call, err := range calls {
			if !errors.Is(err, outbox.ErrInvalidRunID) {
				t.Errorf("%s with a run id (%s) %q: %v, want ErrInvalidRunID", call, name, run, err)
			}
		}
	}
	if _, err := s.EnqueueEvent(ctx, strings.Repeat("é", outbox.MaxRunIDLen/2), outboxtest.LineOf("x")); err != nil {
		t.Errorf("a run id of exactly %d bytes: %v", outbox.MaxRunIDLen, err)
	}
	for name, key := range map[string]string{
		"empty": "", "invalid UTF-8": "k\xff", "control": "k\r", "1025 bytes": strings.Repeat("k", outbox.MaxOnceKeyLen+1),
	} {
		if _, _, err := s.EnqueueOnce(ctx, "r", key, outboxtest.LineOf("x")); !errors.Is(err, outbox.ErrInvalidOnceKey) {
			t.Errorf("EnqueueOnce with a key (%s): %v, want ErrInvalidOnceKey", name, err)
		}
		if err := s.MarkAnnounced(ctx, "r", map[int64]string{1: key}); !errors.Is(err, outbox.ErrInvalidOnceKey) {
			t.Errorf("MarkAnnounced with a key (%s): %v, want ErrInvalidOnceKey", name, err)
		}
	}
	// Nothing was stored and no number used.
	if n := outboxtest.CountRows(t, path, "engine_run_id = 'r'"); n != 0 {
		t.Errorf("%d rows of r after refused calls", n)
	}
	if seq := outboxtest.MustEnqueue(t, s, "r"); seq != 1 {
		t.Errorf("first seq of r after refused calls: %d", seq)
	}
}
