// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"weak"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/textmachine/outbox/inbox"
)

// register writes seq, in the stream read now, as this reader's position in the readers' bucket.
// Once this Inbox wrote the key, it writes only over its own last write (the key's revision): a key
// anyone else wrote meanwhile is another consumer, with an inbox of its own, reading under the same
// name, and each would overwrite the other's position, so that the key could run ahead of one of
// them. That is ErrReaderNameShared. A key removed meanwhile (ForgetReader) is written again. Calls
// on one Inbox share its writes: they read positions of the same database.
func (s *streamSource) register(ctx context.Context, seq uint64) error {
	rctx, cancel := s.request(ctx)
	defer cancel()
	if registerStep != nil {
		registerStep("before_register")
	}
	key, val := readerKeyPrefix+keyEscape(s.in.ReaderName()), StreamPosition{Seq: seq, Created: s.created}.encode()
	w := writerOf(s.in, ReadersBucket(s.name), key)
	w.mu.Lock()
	rev, err := w.write(rctx, s.kv, key, val)
	w.tried = val
	if err == nil {
		w.rev = rev
	}
	w.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrReaderNameShared) {
			err = fmt.Errorf("%w: reader %q of stream %q (its inbox at stream sequence %d): give each consumer its own name (inbox.WithReaderName)",
				err, s.in.ReaderName(), s.name, seq)
		}
		return err
	}
	if registerStep != nil {
		registerStep("after_register")
	}
	return nil
}

// keyWriter is what an Inbox last wrote to a reader's key: its revision (0: nothing yet) and the
// value last tried.
type keyWriter struct {
	mu    sync.Mutex
	rev   uint64
	tried []byte
}

type keyWriterID struct {
	in          weak.Pointer[inbox.Inbox]
	bucket, key string
}

// keyWriters holds a keyWriter per Inbox and key, dropped when the Inbox is collected.
var keyWriters sync.Map // keyWriterID → *keyWriter

func writerOf(in *inbox.Inbox, bucket, key string) *keyWriter {
	id := keyWriterID{weak.Make(in), bucket, key}
	if w, ok := keyWriters.Load(id); ok {
		return w.(*keyWriter)
	}
	w, loaded := keyWriters.LoadOrStore(id, &keyWriter{})
	if !loaded {
		runtime.AddCleanup(in, func(id keyWriterID) { keyWriters.Delete(id) }, id)
	}
	return w.(*keyWriter)
}

// write writes val to key over the Inbox's last write; the caller holds w.mu.
func (w *keyWriter) write(ctx context.Context, kv jetstream.KeyValue, key string, val []byte) (uint64, error) {
	if w.rev == 0 {
		return kv.Put(ctx, key, val)
	}
	rev, err := kv.Update(ctx, key, val, w.rev)
	if err == nil || !wrongLastSeq(err) {
		return rev, err
	}
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return kv.Put(ctx, key, val) // forgotten while this reader reads: it registers again
	case err != nil:
		return 0, err
	case w.tried != nil && bytes.Equal(e.Value(), w.tried):
		// The Inbox's own last write, which reached the server though its answer did not come
		// back (a timeout, a failover); or another consumer at the same position, which does no
		// harm yet and shows at the next write that differs.
		return kv.Update(ctx, key, val, e.Revision())
	}
	got := string(e.Value())
	if p, err := ParseStreamPosition(e.Value()); err == nil {
		got = p.String()
	}
	return 0, fmt.Errorf("%w: its key %s in %s holds %s, which this consumer did not write", ErrReaderNameShared, key, kv.Bucket(), got)
}

// wrongLastSeq says whether err is the server's refusal of a write whose expected last sequence of
// its subject (a key's revision) is not the subject's.
func wrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// registerStep, when set, is called just before a reader writes its key and just after the write
// succeeded (tests: a process killed there).
var registerStep func(step string)
