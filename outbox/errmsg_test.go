// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// TestErrorsNameThePackageOnce: a failure deep in the relay or the store reads as one chain, each
// step adding its context and the package named once, by the sentinel at its end.
func TestErrorsNameThePackageOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "book.db")
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueEvent(ctx, "earlier", func(seq int64) ([]byte, error) {
		return fmt.Appendf(nil, `{"engine_run_id":"earlier","seq":%d}`, seq), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	recoverErr := outboxtest.NewRelay(t, s, &refusingSink{}, "now", outbox.WithFlushAttempts(1)).Recover(ctx)
	_, lineErr := s.EnqueueEvent(ctx, "now", func(int64) ([]byte, error) { return []byte("a\nb"), nil })
	markErr := s.MarkAnnounced(ctx, "now", map[int64]string{7: "unit-7"})
	_, lockErr := outbox.Open(ctx, path)
	for _, c := range []struct {
		name     string
		err      error
		sentinel error
	}{
		{"recover", recoverErr, outbox.ErrSinkRefused},
		{"invalid line", lineErr, outbox.ErrInvalidLine},
		{"mark unknown event", markErr, outbox.ErrUnknownEvent},
		{"second writer", lockErr, outbox.ErrLocked},
	} {
		if !errors.Is(c.err, c.sentinel) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.sentinel)
			continue
		}
		if n := strings.Count(c.err.Error(), "outbox:"); n != 1 {
			t.Errorf("%s: %q names the package %d times, want once", c.name, c.err, n)
		}
	}
}

// TestErrorChainsFromEveryPathNameThePackageAtMostOnce: the errors a caller gets from the relay's
// methods, from each enqueue path and from Open, when what fails is deep inside (the sink, a builder, a
// line, a closed store, the file), never name the package twice.
func TestErrorChainsFromEveryPathNameThePackageAtMostOnce(t *testing.T) {
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	bad := func(int64) ([]byte, error) { return []byte("a\nb"), nil }
	fail := func(int64) ([]byte, error) { return nil, outboxtest.ErrRender }
	sink := outboxtest.NewMemSink()
	sink.SetFailing(true)
	relay := outboxtest.FastRelay(t, s, sink, "r", outbox.WithFlushAttempts(2))
	errs := map[string]error{}
	errs["Flush"] = relay.Flush(ctx)
	// A bound for a Run that would not stop, not the refusal's: ended first, it would test the
	// context's error instead.
	rctx, cancel := context.WithTimeout(ctx, liveness)
	errs["Run"] = outboxtest.FastRelay(t, s, &refusingSink{}, "r").Run(rctx)
	cancel()
	_, errs["EnqueueEvent line"] = s.EnqueueEvent(ctx, "r", bad)
	_, errs["EnqueueEvent build"] = s.EnqueueEvent(ctx, "r", fail)
	_, _, errs["EnqueueOnce build"] = s.EnqueueOnce(ctx, "r", "k", fail)
	_, errs["EnqueueEvents line"] = s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{outboxtest.LineOf("x"), bad})
	_, errs["EnqueueEvents build"] = s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{fail})
	errs["WriteTx EnqueueTx"] = s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := s.EnqueueTx(ctx, tx, "r", bad)
		return err
	})
	ftx, err := foreignDB(t, path).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, errs["foreign EnqueueTx"] = s.EnqueueTx(ctx, ftx, "r", fail)
	ftx.Rollback()
	_, errs["Open a directory"] = outbox.Open(ctx, t.TempDir())
	noDB := filepath.Join(t.TempDir(), "not.db")
	if err := os.WriteFile(noDB, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs["Open not a database"] = outbox.Open(ctx, noDB)
	s.Close()
	_, errs["EnqueueEvent closed"] = s.EnqueueEvent(ctx, "r", outboxtest.LineOf("x"))
	errs["Flush closed"] = relay.Flush(ctx)
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if n := strings.Count(err.Error(), "outbox:"); n > 1 {
			t.Errorf("%s: %q names the package %d times, want at most once", name, err, n)
		}
	}
}
