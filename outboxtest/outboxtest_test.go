// SPDX-License-Identifier: Apache-2.0

package outboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
	"github.com/textmachine/outbox/outboxtest"
)

func TestAStoresLinesReachAnInboxThroughTheSinkAndFeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := outboxtest.NewStore(t)
	for _, run := range []string{"r1", "r2"} {
		if _, err := s.EnqueueEvent(ctx, run, journal.Handshake(run, nil)); err != nil {
			t.Fatal(err)
		}
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			_, err := s.EnqueueTx(ctx, tx, run, journal.Event("spend", map[string]int{"cents": 250}))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	sink := outboxtest.NewSink()
	outboxtest.Flush(t, s, sink, "r1")
	outboxtest.Flush(t, s, sink, "r2")
	outboxtest.Flush(t, s, sink, "r1") // nothing left to project
	if n := len(sink.Lines()); n != 4 {
		t.Fatalf("the sink holds %d lines, want 4", n)
	}

	in := outboxtest.NewInbox(t)
	var spent int
	r := inbox.NewRouter(inbox.WithUnknownType(inbox.UnknownIgnore))
	r.Handle("spend", inbox.Decode(func(_ context.Context, _ *sql.Tx, _ inbox.Event, v struct{ Cents int }) error {
		spent += v.Cents
		return nil
	}))
	rep := outboxtest.Feed(t, in, r.Route, sink.Lines()...)
	if rep != (inbox.Report{Applied: 4}) || spent != 500 {
		t.Fatalf("report %+v, spent %d", rep, spent)
	}
	if rep := outboxtest.Feed(t, in, r.Route, sink.Lines()...); rep != (inbox.Report{Duplicates: 4}) {
		t.Fatalf("fed again: %+v", rep)
	}
}

func TestNewStoreRefusesABuildersLineThatIsNotItsRunsAtTheEnqueue(t *testing.T) {
	t.Parallel()
	s := outboxtest.NewStore(t)
	_, err := s.EnqueueEvent(context.Background(), "r1", journal.Builder("r2", "t", nil))
	if !errors.Is(err, outbox.ErrInvalidLine) {
		t.Fatalf("EnqueueEvent: %v, want ErrInvalidLine", err)
	}
	loose := outboxtest.NewStore(t, outbox.WithLineCheck(func(string, int64, []byte) error { return nil }))
	if _, err := loose.EnqueueEvent(context.Background(), "r1", journal.Builder("r2", "t", nil)); err != nil {
		t.Fatalf("with the line check replaced: %v", err)
	}
}

func TestNewStoreAndNewInboxLiveInTheTestsTemporaryDirectoryAndCloseWithIt(t *testing.T) {
	t.Parallel()
	var s *outbox.Store
	var in *inbox.Inbox
	t.Run("test", func(t *testing.T) {
		s = outboxtest.NewStore(t)
		in = outboxtest.NewInbox(t)
		if _, err := os.Stat(s.Path()); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := s.EventsUsed(context.Background(), "r"); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("the store after its test: %v, want ErrClosed", err)
	}
	if _, err := in.Position(context.Background(), "r"); !errors.Is(err, inbox.ErrClosed) {
		t.Errorf("the inbox after its test: %v, want ErrClosed", err)
	}
	if _, err := os.Stat(s.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the book after its test: %v", err)
	}
}

// fatalT records a helper's failure instead of ending a test.
type fatalT struct {
	testing.TB
	failed string
}

func (t *fatalT) Helper() {}
func (t *fatalT) Fatalf(format string, args ...any) {
	t.failed = fmt.Sprintf(format, args...)
	panic(t)
}

func TestFeedFailsTheTestOnAHandlersError(t *testing.T) {
	t.Parallel()
	in := outboxtest.NewInbox(t)
	ft := &fatalT{TB: t}
	func() {
		defer func() {
			if v := recover(); v != nil && v != ft {
				panic(v)
			}
		}()
		outboxtest.Feed(ft, in, func(context.Context, *sql.Tx, inbox.Event) error { return errors.New("boom") },
			[]byte(`{"engine_run_id":"r","seq":1}`))
	}()
	if ft.failed == "" {
		t.Fatal("Feed did not fail the test")
	}
}
