package jetstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
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
	err := readStream(ctx, js, streamName, v.Check)
	return v.Report(), err
}

// WriteLines writes the stream's messages, in stream order, as journal lines (each followed by a
// newline) to w, up to the last message the stream holds when the call begins. It returns how many
// it wrote. A stream read this way is a journal file: journal.Verify and the outbox command read it.
func WriteLines(ctx context.Context, js jetstream.JetStream, streamName string, w io.Writer) (int, error) {
	bw := bufio.NewWriter(w)
	n := 0
	err := readStream(ctx, js, streamName, func(data []byte) error {
		n++
		bw.Write(data)
		return bw.WriteByte('\n')
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return n, err
}

// readStream calls fn with every message of the stream, in order, up to its last message at the start.
func readStream(ctx context.Context, js jetstream.JetStream, streamName string, fn func([]byte) error) error {
	stream, err := js.Stream(ctx, streamName)
	if err != nil {
		return fmt.Errorf("jetstream: stream %q: %w", streamName, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("jetstream: stream %q: %w", streamName, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
	}
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			meta, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
			}
			if meta.Sequence.Stream > last {
				return nil
			}
			if err := fn(msg.Data()); err != nil {
				return err
			}
			if meta.Sequence.Stream == last {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
		}
		if n == 0 {
			return fmt.Errorf("jetstream: read stream %q: no message before sequence %d arrived", streamName, last)
		}
	}
}
