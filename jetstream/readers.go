// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The readers' bucket of a stream is a key-value bucket that ApplyStream, FollowStream, Trim and the
// sink share:
//
//   - r.<reader>: the position a reader's inbox has committed (its StreamPosition without a floor),
//     written after each commit. A key may lag its inbox, never run ahead of it; Trim removes
//     nothing after the lowest.
//   - t.<run token>: the highest seq of the run's lines Trim removed, written before it removes
//     them, so that the sink takes a line of the run that the stream no longer holds for one it held.
//   - capped.<the stream's creation time in Unix nanoseconds>: the stream sequence below which the hard cap removed lines whether the readers had
//     applied them or not, written before it removes them: a reader whose position is below it has
//     a retention gap.
//   - trimming.<the stream's creation time in Unix nanoseconds>.<subject prefix>: the highest
//     stream sequence below which a trim of the prefix's lines decided to remove what every reader
//     had applied, written before it looks at the readers a second time and removes anything. A
//     reader of the prefix that starts without a position reads it after writing its key and reads
//     nothing below it: see Trim for why both orders are needed.
//
// Keys escape every byte outside letters, digits, '-' and '_' as '=' and two hex digits.

// ReadersBucket is the name of the key-value bucket in which the readers of stream register their
// positions and Trim records what it removed.
func ReadersBucket(stream string) string { return "OUTBOX_READERS_" + keyEscape(stream) }

const (
	readerKeyPrefix = "r."
	trimKeyPrefix   = "t."
	cappedPrefix    = "capped."
	trimmingPrefix  = "trimming."
)

// cappedKey is the key of the cap's mark in the stream created at created: a stream deleted and
// created again under the same name starts without one.
func cappedKey(created time.Time) string {
	return cappedPrefix + strconv.FormatInt(created.UnixNano(), 10)
}

// trimmingKey is the key of the announced limit of the trims of prefix's lines in the stream
// created at created: a trim of one prefix removes nothing of another's.
func trimmingKey(created time.Time, prefix string) string {
	return trimmingPrefix + strconv.FormatInt(created.UnixNano(), 10) + "." + keyEscape(prefix)
}

func keyEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if tokenByte(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "=%02x", c)
		}
	}
	return b.String()
}

func keyUnescape(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case tokenByte(c):
			b.WriteByte(c)
		case c == '=' && i+2 < len(s):
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", false
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), true
}

// readersBucket returns the stream's readers' bucket, creating it (file storage, one value a key,
// as many replicas as the stream) when create is set and it does not exist yet. Without create, a
// missing bucket is jetstream.ErrBucketNotFound.
func readersBucket(ctx context.Context, js jetstream.JetStream, stream string, replicas int, create bool) (jetstream.KeyValue, error) {
	name := ReadersBucket(stream)
	kv, err := js.KeyValue(ctx, name)
	if err == nil || !create || !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 1,
		Storage: jetstream.FileStorage, Replicas: max(replicas, 1),
		Description: "outbox: the readers of stream " + stream + " and what was trimmed from it"})
	if errors.Is(err, jetstream.ErrBucketExists) {
		return js.KeyValue(ctx, name)
	}
	return kv, err
}

// ReaderPosition is a reader registered with a stream: its name and the stream sequence its inbox
// had committed when it last wrote its key.
type ReaderPosition struct {
	Name    string
	Seq     uint64
	Created time.Time // the creation time of the stream the position was taken in
	Updated time.Time // when the key was written
}

// Readers lists the readers registered with stream, in key order. A stream without a readers'
// bucket has none.
func Readers(ctx context.Context, js jetstream.JetStream, stream string) ([]ReaderPosition, error) {
	kv, err := readersBucket(ctx, js, stream, 0, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: the readers of stream %q: %w", stream, err)
	}
	return listReaders(ctx, kv)
}

func listReaders(ctx context.Context, kv jetstream.KeyValue) ([]ReaderPosition, error) {
	lister, err := kv.ListKeysFiltered(ctx, readerKeyPrefix+">")
	if err != nil {
		return nil, fmt.Errorf("jetstream: list the readers in %s: %w", kv.Bucket(), err)
	}
	var out []ReaderPosition
	for key := range lister.Keys() {
		name, ok := keyUnescape(strings.TrimPrefix(key, readerKeyPrefix))
		if !ok {
			continue
		}
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("jetstream: read reader %q in %s: %w", name, kv.Bucket(), err)
		}
		p, err := ParseStreamPosition(e.Value())
		if err != nil {
			// A key that does not parse holds the lowest position: it keeps everything until it
			// is written again or removed.
			p = StreamPosition{}
		}
		out = append(out, ReaderPosition{Name: name, Seq: p.Seq, Created: p.Created, Updated: e.Created()})
	}
	return out, nil
}

// ForgetReader removes a reader's registration from stream, so that Trim no longer keeps what it
// has not applied: for a reader that is gone for good. A reader that runs again registers again,
// from the position its inbox holds.
func ForgetReader(ctx context.Context, js jetstream.JetStream, stream, name string) error {
	kv, err := readersBucket(ctx, js, stream, 0, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("jetstream: the readers of stream %q: %w", stream, err)
	}
	if err := kv.Purge(ctx, readerKeyPrefix+keyEscape(name)); err != nil {
		return fmt.Errorf("jetstream: forget reader %q of stream %q: %w", name, stream, err)
	}
	return nil
}

// uintValue reads a key holding a decimal number; a missing key or bucket is 0.
func uintValue(ctx context.Context, kv jetstream.KeyValue, key string) (uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(string(e.Value()), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("jetstream: key %s of %s holds %q, not a number", key, kv.Bucket(), e.Value())
	}
	return n, nil
}

// raiseValue writes n to key unless the key holds as much or more already: what was trimmed only
// grows, whichever of two trimmers writes last.
func raiseValue(ctx context.Context, kv jetstream.KeyValue, key string, n uint64) error {
	for {
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err := kv.Create(ctx, key, []byte(strconv.FormatUint(n, 10))); errors.Is(err, jetstream.ErrKeyExists) {
				continue
			} else {
				return err
			}
		case err != nil:
			return err
		}
		if have, perr := strconv.ParseUint(string(e.Value()), 10, 64); perr == nil && have >= n {
			return nil
		}
		_, err = kv.Update(ctx, key, []byte(strconv.FormatUint(n, 10)), e.Revision())
		if err == nil {
			return nil
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence &&
			apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant {
			return err
		}
	}
}

// CappedBelow returns the stream sequence below which Trim's hard cap removed the lines of stream,
// applied by its readers or not; 0 when the cap never acted on the stream as it is now (one deleted
// and created again starts without). A reader whose position is below it, less one, has a
// retention gap.
func CappedBelow(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("jetstream: stream %q: %w", stream, err)
	}
	kv, err := readersBucket(ctx, js, stream, 0, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return 0, nil
	}
	if err == nil {
		var n uint64
		if n, err = uintValue(ctx, kv, cappedKey(st.CachedInfo().Created)); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("jetstream: the cap's mark of stream %q: %w", stream, err)
}
