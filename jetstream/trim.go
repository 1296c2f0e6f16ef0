// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/journal"
)

// DefaultTrimKeep is how long Trim keeps a message by default, whatever the readers have applied.
const DefaultTrimKeep = 24 * time.Hour

type trimConfig struct {
	prefix   string
	keep     time.Duration
	maxBytes uint64
	logger   *slog.Logger
}

// TrimOption configures Trim. WithSubjectPrefix is one too.
type TrimOption interface{ trimOption(*trimConfig) error }

type trimOptionFunc func(*trimConfig) error

func (f trimOptionFunc) trimOption(c *trimConfig) error { return f(c) }

func (p prefixOption) trimOption(c *trimConfig) error {
	if err := validPrefix(string(p)); err != nil {
		return err
	}
	c.prefix = string(p)
	return nil
}

// WithKeep sets how long Trim keeps a message after it reached the stream, whatever the readers
// have applied (default DefaultTrimKeep; 0 keeps nothing for its age). The hard cap does not wait
// for it.
func WithKeep(d time.Duration) TrimOption {
	return trimOptionFunc(func(c *trimConfig) error {
		if d < 0 {
			return fmt.Errorf("jetstream: keep %v, need 0 or more", d)
		}
		c.keep = d
		return nil
	})
}

// WithMaxBytes is the hard cap: when the stream holds more than n bytes after the ordinary trim,
// Trim removes its oldest messages until it holds at most n, applied by the readers or not. It logs
// at Error the readers it left behind; each stops with ErrRetentionGap at its next read, naming
// what it lost. 0: no cap.
func WithMaxBytes(n uint64) TrimOption {
	return trimOptionFunc(func(c *trimConfig) error { c.maxBytes = n; return nil })
}

// WithTrimLogger sets the logger of Trim (default: none).
func WithTrimLogger(l *slog.Logger) TrimOption {
	return trimOptionFunc(func(c *trimConfig) error { c.logger = l; return nil })
}

// TrimReport says what one Trim did.
type TrimReport struct {
	Readers []ReaderPosition // the readers registered when it decided what to remove
	// Floor is one past the lowest registered reader's sequence: every reader applied everything
	// of the filter below it. 0 when no reader is registered: then nothing is removed but by the cap.
	Floor uint64
	// Young is the first stream sequence of a message younger than the keep duration.
	Young uint64
	// Below is the stream sequence below which the ordinary trim removed every line of the filter.
	Below uint64
	// Capped is the stream sequence below which the hard cap removed every line of the filter, 0
	// when the cap did not act; LeftBehind are the readers whose unapplied lines it removed.
	Capped     uint64
	LeftBehind []ReaderPosition
	Purged     uint64 // messages removed
	Runs       int    // runs' subjects lines were removed from
	// BytesBefore and BytesAfter are the stream's size when Trim began and when it ended.
	BytesBefore, BytesAfter uint64
}

// Trim removes from stream the lines every registered reader has applied (below Floor) and that
// are older than the keep duration, and, with WithMaxBytes, the oldest lines past that until the
// stream holds at most the cap. It changes no setting of the stream: the stream keeps no limit that
// deletes behind the readers' back, and the sink goes on appending to it.
//
// Before it removes a run's lines, Trim records in the readers' bucket (ReadersBucket) the highest
// seq of them it removes; the sink reads that record when the stream no longer holds a line it is
// asked to place again (a relay's re-delivery after a crash) or holds none of the run's lines (a run
// whose every line was removed, its engine still appending): a line at or below the record is one
// the stream held, and the run's next line is placed after it. So Trim need not know whether a run
// is finished: a finished run's subject is removed whole, and a run that goes on after all goes on.
// A line so re-delivered is not compared byte for byte (the stream no longer holds it): every reader
// applied the one it held.
//
// A reader that starts while Trim runs loses nothing it begins to read: Trim writes the stream
// sequence it is to remove below to the bucket before it looks at the readers a second time and
// keeps what any of them registered meanwhile, and a reader writes its key before it reads where
// the stream begins and that announcement, and starts above both.
//
// The hard cap writes its mark (the stream sequence it removes below) to the bucket before it
// removes anything, so that a reader whose position is below it stops with a *RetentionGapError
// wrapping ErrRetentionGap, even while the stream still holds messages below the mark on other
// subjects. Trim is safe to run from several processes at once and to kill at any step: each record
// is written before what it describes is removed, and only grows.
func Trim(ctx context.Context, js jetstream.JetStream, stream string, opts ...TrimOption) (TrimReport, error) {
	c := trimConfig{prefix: DefaultPrefix, keep: DefaultTrimKeep}
	for _, o := range opts {
		if o != nil {
			if err := o.trimOption(&c); err != nil {
				return TrimReport{}, err
			}
		}
	}
	if c.logger == nil {
		c.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if js == nil || !validStreamName(stream) {
		return TrimReport{}, fmt.Errorf("jetstream: Trim: invalid stream name %q", stream)
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return TrimReport{}, fmt.Errorf("jetstream: trim stream %q: %w", stream, err)
	}
	info := st.CachedInfo()
	kv, err := readersBucket(ctx, js, stream, info.Config.Replicas, true)
	if err != nil {
		return TrimReport{}, fmt.Errorf("jetstream: trim stream %q: its readers' bucket: %w", stream, err)
	}
	t := &trimmer{st: st, kv: kv, name: stream, created: info.Created, cfg: c, filter: c.prefix + ".>"}
	var rep TrimReport
	rep.BytesBefore = info.State.Bytes
	if rep.Readers, err = listReaders(ctx, kv); err != nil {
		return rep, err
	}
	rep.Floor = readersFloor(rep.Readers, info.Created)
	if rep.Young, err = t.young(ctx, info.State); err != nil {
		return rep, err
	}
	rep.Below = min(rep.Floor, rep.Young)
	if rep.Below > info.State.FirstSeq {
		// A reader may start while this trim runs. It writes its key before it reads the stream's
		// first sequence and this announcement; this trim writes the announcement before it reads
		// the keys again. Of two writes each followed by a read of the other's, at least one read
		// sees the other's write: either the second look finds the new reader's key and keeps what
		// it reads, or the reader finds the announcement and starts above what goes. One look at
		// the keys alone would remove, below a floor taken before the reader registered, what the
		// reader had just begun to read.
		if err := step("looked"); err != nil {
			return rep, err
		}
		if err := raiseValue(ctx, kv, trimmingKey(info.Created, c.prefix), rep.Below); err != nil {
			return rep, fmt.Errorf("jetstream: trim stream %q: announce the removal below stream sequence %d: %w", stream, rep.Below, err)
		}
		if err := step("announced"); err != nil {
			return rep, err
		}
		if rep.Readers, err = listReaders(ctx, kv); err != nil {
			return rep, err
		}
		rep.Floor = min(rep.Floor, readersFloor(rep.Readers, info.Created))
		rep.Below = min(rep.Floor, rep.Young)
	}
	if rep.Below > info.State.FirstSeq {
		if err := t.purgeBelow(ctx, rep.Below, &rep); err != nil {
			return rep, err
		}
	}
	if err := t.cap(ctx, &rep); err != nil {
		return rep, err
	}
	now, err := st.Info(ctx)
	if err != nil {
		return rep, fmt.Errorf("jetstream: trim stream %q: %w", stream, err)
	}
	rep.BytesAfter = now.State.Bytes
	return rep, nil
}

// readersFloor is one past the lowest of the readers' sequences, those taken in a stream of the same
// name before the one created at created counting as 0 (it holds everything); 0 without readers.
func readersFloor(readers []ReaderPosition, created time.Time) uint64 {
	if len(readers) == 0 {
		return 0
	}
	floor := ^uint64(0)
	for _, r := range readers {
		seq := r.Seq
		if !r.Created.Equal(created) {
			seq = 0
		}
		floor = min(floor, seq+1)
	}
	return floor
}

// trimStep, when set, is called after the first look at the readers and after each step of a trim
// that leaves a record behind (the announcement, a removal recorded, a removal done, the cap's
// mark); its error stops the trim there (tests).
var trimStep func(step string) error

func step(name string) error {
	if trimStep != nil {
		return trimStep(name)
	}
	return nil
}

type trimmer struct {
	st      jetstream.Stream
	kv      jetstream.KeyValue
	name    string
	created time.Time
	cfg     trimConfig
	filter  string
}

// young returns the first stream sequence of a message of the filter younger than the keep
// duration, by bisecting the stream's sequences: a message's time grows with its sequence.
func (t *trimmer) young(ctx context.Context, st jetstream.StreamState) (uint64, error) {
	if t.cfg.keep == 0 || st.Msgs == 0 {
		return st.LastSeq + 1, nil
	}
	cut := time.Now().Add(-t.cfg.keep)
	lo, hi := st.FirstSeq, st.LastSeq+1 // the answer is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		msg, err := t.st.GetMsg(ctx, mid, jetstream.WithGetMsgSubject(t.filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			hi = mid
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("jetstream: trim stream %q: read stream sequence %d: %w", t.name, mid, err)
		}
		if msg.Time.After(cut) {
			hi = mid
		} else {
			lo = msg.Sequence + 1
		}
	}
	return lo, nil
}

// purgeBelow removes every line of the filter below stream sequence limit, a run's subject at a
// time, each after recording the highest seq of the run it removes.
func (t *trimmer) purgeBelow(ctx context.Context, limit uint64, rep *TrimReport) error {
	info, err := t.st.Info(ctx, jetstream.WithSubjectFilter(t.filter))
	if err != nil {
		return fmt.Errorf("jetstream: trim stream %q: list its subjects: %w", t.name, err)
	}
	for subject, n := range info.State.Subjects {
		if n == 0 || ctx.Err() != nil {
			continue
		}
		if err := t.purgeSubject(ctx, subject, limit, rep); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (t *trimmer) purgeSubject(ctx context.Context, subject string, limit uint64, rep *TrimReport) error {
	run, ok := runOfToken(subject[len(t.cfg.prefix)+1:])
	if !ok {
		return nil // not a run's subject: not the trimmer's to remove
	}
	first, err := t.st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("jetstream: trim stream %q: the first line of run %q: %w", t.name, run, err)
	}
	if first.Sequence >= limit {
		return nil
	}
	// The highest seq removed: the one before the first line kept, or the run's last line.
	var removed int64
	kept, err := t.st.GetMsg(ctx, limit, jetstream.WithGetMsgSubject(subject))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		last, err := t.st.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return fmt.Errorf("jetstream: trim stream %q: the last line of run %q: %w", t.name, run, err)
		}
		if last.Sequence >= limit {
			return nil // appended meanwhile: the next trim sees it
		}
		if _, removed, err = journal.LineKey(last.Data); err != nil {
			return fmt.Errorf("jetstream: trim stream %q: stream sequence %d is not run %q's line: %w", t.name, last.Sequence, run, err)
		}
	case err != nil:
		return fmt.Errorf("jetstream: trim stream %q: a line of run %q: %w", t.name, run, err)
	default:
		_, next, err := journal.LineKey(kept.Data)
		if err != nil {
			return fmt.Errorf("jetstream: trim stream %q: stream sequence %d is not run %q's line: %w", t.name, kept.Sequence, run, err)
		}
		removed = next - 1
	}
	if removed > 0 {
		if err := raiseValue(ctx, t.kv, trimKeyPrefix+keyEscape(Token(run)), uint64(removed)); err != nil {
			return fmt.Errorf("jetstream: trim stream %q: record what is removed of run %q: %w", t.name, run, err)
		}
	}
	if err := step("recorded"); err != nil {
		return err
	}
	before, err := t.st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return fmt.Errorf("jetstream: trim stream %q: %w", t.name, err)
	}
	if err := t.st.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(limit)); err != nil {
		return fmt.Errorf("jetstream: trim stream %q: remove the lines of run %q below stream sequence %d: %w", t.name, run, limit, err)
	}
	after, err := t.st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err == nil && before.State.Msgs >= after.State.Msgs {
		rep.Purged += before.State.Msgs - after.State.Msgs
	}
	rep.Runs++
	return step("purged")
}

// cap removes the oldest lines, applied or not, while the stream holds more than the cap.
func (t *trimmer) cap(ctx context.Context, rep *TrimReport) error {
	if t.cfg.maxBytes == 0 {
		return nil
	}
	for {
		info, err := t.st.Info(ctx)
		if err != nil {
			return fmt.Errorf("jetstream: trim stream %q: %w", t.name, err)
		}
		st := info.State
		if st.Bytes <= t.cfg.maxBytes || st.Msgs == 0 {
			break
		}
		// As many of the oldest messages as the excess takes at the mean size, one at least.
		per := max(st.Bytes/st.Msgs, 1)
		n := (st.Bytes-t.cfg.maxBytes+per-1)/per + 1
		limit := min(max(rep.Capped, rep.Below, st.FirstSeq)+n, st.LastSeq+1)
		if err := raiseValue(ctx, t.kv, cappedKey(t.created), limit); err != nil {
			return fmt.Errorf("jetstream: trim stream %q: record the cap's mark: %w", t.name, err)
		}
		rep.Capped = limit
		if err := step("capmark"); err != nil {
			return err
		}
		if err := t.purgeBelow(ctx, limit, rep); err != nil {
			return err
		}
		if limit > st.LastSeq {
			break
		}
	}
	if rep.Capped == 0 {
		return nil
	}
	var names []string
	for _, r := range rep.Readers {
		if r.Seq+1 < rep.Capped {
			rep.LeftBehind = append(rep.LeftBehind, r)
			names = append(names, r.Name)
		}
	}
	if len(names) > 0 {
		t.cfg.logger.Error("jetstream: the stream reached its cap: lines removed before these readers applied them; "+
			"they stop with a retention gap", "stream", t.name, "max_bytes", t.cfg.maxBytes,
			"removed_below", rep.Capped, "readers", names)
	}
	return nil
}
