// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamStatus is what a stream holds and how far behind each registered reader is: what an
// operator sizes the cap by and watches (outbox stream readers, the metrics module's stream
// collector).
type StreamStatus struct {
	Stream            string
	Created           time.Time
	Bytes, Msgs       uint64
	FirstSeq, LastSeq uint64
	// CappedBelow is the stream sequence below which Trim's hard cap removed the lines, applied by
	// the readers or not; 0 when it never acted on the stream as it is now.
	CappedBelow uint64
	Readers     []ReaderLag
}

// ReaderLag is a registered reader with what it has not applied.
type ReaderLag struct {
	ReaderPosition
	// Lag is the stream's last sequence less the reader's registered one: at most the messages it
	// has still to apply (other subjects' messages and removed ones count too). A position taken in
	// an earlier stream of the same name (Earlier) lags by the whole stream.
	Lag     uint64
	Earlier bool
	// CapTook is how many stream sequences after the reader's position the cap removed before it
	// applied them (CappedBelow - 1 - Seq, 0 when the reader is at or past the mark): the reader
	// stops with a retention gap at its next read.
	CapTook uint64
}

// Status reads the state of stream and of its registered readers: one stream info request and
// the readers' bucket (a key a reader, and the cap's mark).
func Status(ctx context.Context, js jetstream.JetStream, stream string) (StreamStatus, error) {
	if js == nil || !validStreamName(stream) {
		return StreamStatus{}, fmt.Errorf("jetstream: Status: invalid stream name %q", stream)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return StreamStatus{}, fmt.Errorf("jetstream: stream %q: %w", stream, err)
	}
	info := st.CachedInfo()
	s := StreamStatus{Stream: stream, Created: info.Created, Bytes: info.State.Bytes, Msgs: info.State.Msgs,
		FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq}
	kv, err := readersBucket(ctx, js, stream, 0, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return s, nil // no reader ever registered, nothing trimmed
	}
	if err != nil {
		return s, fmt.Errorf("jetstream: the readers of stream %q: %w", stream, err)
	}
	if s.CappedBelow, err = uintValue(ctx, kv, cappedKey(info.Created)); err != nil {
		return s, fmt.Errorf("jetstream: the cap's mark of stream %q: %w", stream, err)
	}
	rs, err := listReaders(ctx, kv)
	if err != nil {
		return s, err
	}
	for _, r := range rs {
		l := ReaderLag{ReaderPosition: r}
		seq := r.Seq
		if !r.Created.Equal(info.Created) {
			l.Earlier, seq = true, 0
		}
		l.Lag = s.LastSeq - min(seq, s.LastSeq)
		if s.CappedBelow > seq+1 {
			l.CapTook = s.CappedBelow - 1 - seq
		}
		s.Readers = append(s.Readers, l)
	}
	return s, nil
}
