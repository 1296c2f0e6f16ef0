package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/textmachine/outbox/internal/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// liveness bounds a wait for something that takes milliseconds; far above it, so that only a hang
// (a call waiting for itself until the operation timeout) reaches it.
const liveness = 20 * time.Second

// relayCalls are a relay's calls, each made as a nested caller would.
var relayCalls = map[string]func(ctx context.Context, r *outbox.Relay) error{
	"Flush":   func(ctx context.Context, r *outbox.Relay) error { return r.Flush(ctx) },
	"Recover": func(ctx context.Context, r *outbox.Relay) error { return r.Recover(ctx) },
	"Run":     func(ctx context.Context, r *outbox.Relay) error { return r.Run(ctx) },
}

// A relay called from inside a transaction of its store (a WriteTx function, a builder) would record
// its batches with the writer that transaction holds. It fails at once with ErrCallInsideTx, before
// it appends anything: a batch appended then could not be recorded, and the relay's record, made on a
// goroutine of its own beside the next append, would wait for the writer until the operation timeout
// instead of being caught.
func TestARelayCalledFromInsideATransactionFailsAtOnceAndAppendsNothing(t *testing.T) {
	inside := map[string]func(s *outbox.Store, call func() error) error{
		"WriteTx": func(s *outbox.Store, call func() error) error {
			return s.WriteTx(context.Background(), func(*sql.Tx) error { return call() })
		},
		"builder": func(s *outbox.Store, call func() error) error {
			_, err := s.EnqueueEvent(context.Background(), "outer", func(int64) ([]byte, error) {
				return []byte("x"), call()
			})
			return err
		},
	}
	for where, in := range inside {
		for _, group := range []bool{true, false} {
			for name, call := range relayCalls {
				t.Run(fmt.Sprintf("%s/%s/group=%v", where, name, group), func(t *testing.T) {
					opts := []outbox.Option{outbox.WithGroupCommit(group), outbox.WithOpTimeout(time.Minute)}
					s := openStore(t, opts...)
					ctx := context.Background()
					enqueueSpends(t, s, 30)
					// Reopened, the run is an earlier process's, which Recover projects too.
					s = outboxtest.Reopen(t, s, opts...)
					run := "run"
					if name == "Recover" {
						run = "later"
					}
					sink := outboxtest.NewMemSink()
					r := outboxtest.NewRelay(t, s, sink, run, outbox.WithBatchSize(10))
					var inner error
					done := make(chan error, 1)
					go func() {
						done <- in(s, func() error {
							inner = call(ctx, r)
							return inner
						})
					}()
					select {
					case <-done:
					case <-time.After(liveness):
						t.Fatalf("%s from inside a transaction did not return", name)
					}
					if !errors.Is(inner, outbox.ErrCallInsideTx) {
						t.Errorf("%s from inside a transaction: %v, want ErrCallInsideTx", name, inner)
					}
					if got := len(sink.All()); got != 0 {
						t.Errorf("the sink got %d lines from a relay that could not record them", got)
					}
					// Outside the transaction the same relay projects everything.
					after := r.Flush
					if name == "Recover" {
						after = r.Recover
					}
					if err := after(ctx); err != nil {
						t.Fatal(err)
					}
					if got := len(sink.All()); got != 30 {
						t.Errorf("the sink holds %d lines after the relay ran outside, want 30", got)
					}
				})
			}
		}
	}
}
