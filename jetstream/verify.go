package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/journal"
)

// Verify reads the stream streamName from its first message to the last one it holds when the call
// begins, in stream order, and checks the lines with the journal's rules: the same Report, and the
// same errors (*journal.Error wrapping journal.ErrStreamGap, journal.ErrPayloadConflict or
// journal.ErrMalformed) as journal.Verify on a file. A stream has no torn tail.
func Verify(ctx context.Context, js jetstream.JetStream, streamName string) (journal.Report, error) {
	v := journal.NewVerifier()
	stream, err := js.Stream(ctx, streamName)
	if err != nil {
		return v.Report(), fmt.Errorf("jetstream: stream %q: %w", streamName, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return v.Report(), fmt.Errorf("jetstream: stream %q: %w", streamName, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return v.Report(), nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return v.Report(), fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
	}
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return v.Report(), fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			meta, err := msg.Metadata()
			if err != nil {
				return v.Report(), fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
			}
			if meta.Sequence.Stream > last {
				return v.Report(), nil
			}
			if err := v.Check(msg.Data()); err != nil {
				return v.Report(), err
			}
			if meta.Sequence.Stream == last {
				return v.Report(), nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return v.Report(), fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
		}
		if n == 0 {
			return v.Report(), fmt.Errorf("jetstream: read stream %q: no message before sequence %d arrived", streamName, last)
		}
	}
}
