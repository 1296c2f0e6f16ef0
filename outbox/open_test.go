// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/dirstate"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

func TestOpenRefusesAHardLinkedDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	s.Close()
	other := filepath.Join(t.TempDir(), "other.db")
	if err := os.Link(path, other); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	before := dirstate.Snapshot(t, filepath.Dir(other))
	for _, p := range []string{other, path} {
		if _, err := outbox.Open(ctx, p); !errors.Is(err, outbox.ErrHardLinked) || !strings.Contains(err.Error(), "2 names") {
			t.Errorf("Open %s with two names: %v, want ErrHardLinked", p, err)
		}
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, filepath.Dir(other))); diff != "" {
		t.Errorf("a refused Open changed the directory (-before +after):\n%s", diff)
	}
	os.Remove(other)
	s, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatalf("Open with one name again: %v", err)
	}
	s.Close()
}

// A swapped path must not cost the platform its database: the book's tables beside an inbox's would
// make inbox.Open refuse the consumer's own database from then on.
func TestOpenRefusesAConsumersDatabaseAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "platform.db")
	in, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	before := dirstate.Snapshot(t, dir)
	s, err := outbox.Open(ctx, path)
	if err == nil {
		s.Close()
		t.Fatal("Open took a consumer's database for a book")
	}
	if !errors.Is(err, outbox.ErrInboxDatabase) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open of a consumer's database: %v, want ErrInboxDatabase naming the path", err)
	}
	if diff := cmp.Diff(before, dirstate.Snapshot(t, dir)); diff != "" {
		t.Errorf("the refused Open changed the directory (-before +after):\n%s", diff)
	}
	in, err = inbox.Open(ctx, path)
	if err != nil {
		t.Fatalf("the inbox refuses its own database after the refused Open: %v", err)
	}
	in.Close()
}
