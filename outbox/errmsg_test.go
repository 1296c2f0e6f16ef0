// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"fmt"
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
