// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Relay defaults.
const (
	DefaultBatchSize     = 256
	DefaultBatchBytes    = 4 << 20
	DefaultMinBackoff    = 10 * time.Millisecond
	DefaultMaxBackoff    = 5 * time.Second
	DefaultFlushAttempts = 5
	DefaultPollInterval  = time.Second
)

type relayConfig struct {
	batch         int
	batchBytes    int
	minBackoff    time.Duration
	maxBackoff    time.Duration
	flushAttempts int
	poll          time.Duration
	log           *slog.Logger
	onProjected   func(runID string, lines int, last int64)
	observer      SinkObserver
	forget        bool
	noBookCheck   bool // WithBookCheck(false)
}

// RelayOption configures NewRelay. An invalid value makes NewRelay fail.
type RelayOption func(*relayConfig) error

// BatchSizer is a Sink that says how many lines a batch should hold for it: a broker that stores a
// batch atomically is faster with larger ones than a file that syncs each. NewRelay takes that size
// unless WithBatchSize is given.
type BatchSizer interface {
	BatchSize() int
}

// WithBatchSize sets how many lines a relay reads and appends at a time, at most. The default is the
// sink's BatchSize when it is a BatchSizer, otherwise DefaultBatchSize (256). WithBatchBytes bounds a
// batch too.
func WithBatchSize(n int) RelayOption {
	return func(c *relayConfig) error {
		if n < 1 {
			return fmt.Errorf("outbox: relay batch size %d, need at least 1", n)
		}
		c.batch = n
		return nil
	}
}

// WithBatchBytes bounds the bytes of lines a relay holds: a batch ends before the line that would
// take it past n bytes, and a relay holds one batch at a time. A batch always holds at least one line, so a line longer than n is read and appended alone. So a
// relay holds at most n bytes of lines plus one line, whatever the lines' size; a sink may copy the
// batch it is given (journal.File does, once). The default is DefaultBatchBytes (4 MiB).
func WithBatchBytes(n int) RelayOption {
	return func(c *relayConfig) error {
		if n < 1 {
			return fmt.Errorf("outbox: relay batch bytes %d, need at least 1", n)
		}
		c.batchBytes = n
		return nil
	}
}

// WithBackoff sets the wait after a failed batch: it starts at min and doubles up to max. The
// defaults are 10ms and 5s.
func WithBackoff(min, max time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if min <= 0 || max < min {
			return fmt.Errorf("outbox: relay backoff %v..%v, need 0 < min <= max", min, max)
		}
		c.minBackoff, c.maxBackoff = min, max
		return nil
	}
}

// WithFlushAttempts sets how many times Flush and Recover try a failing batch before returning the
// sink's error. The default is 5. Run never gives up.
func WithFlushAttempts(n int) RelayOption {
	return func(c *relayConfig) error {
		if n < 1 {
			return fmt.Errorf("outbox: relay flush attempts %d, need at least 1", n)
		}
		c.flushAttempts = n
		return nil
	}
}

// WithPollInterval sets how often Run looks for lines without a signal from the store: commits on a
// transaction the store did not begin do not signal it. The default is 1s.
func WithPollInterval(d time.Duration) RelayOption {
	return func(c *relayConfig) error {
		if d <= 0 {
			return fmt.Errorf("outbox: relay poll interval %v, need > 0", d)
		}
		c.poll = d
		return nil
	}
}

// WithOnProjected sets a function called after each batch the relay places and records: the run,
// the batch's number of lines and its last seq. It runs on the relay's goroutine and must not block;
// a progress display or a metrics counter is its use.
func WithOnProjected(fn func(runID string, lines int, last int64)) RelayOption {
	return func(c *relayConfig) error {
		c.onProjected = fn
		return nil
	}
}

// WithForgetProjected says whether the relay forgets the rows it has projected as it goes. On (the
// default), each batch's record also deletes, in the same transaction, the batch's rows that hold no
// once key. The ledger is kept (rows whose key it holds stay, as they must for the life of the book),
// and so is the run's highest seq, so no number is reused: a process that runs for months keeps in
// its book only what is not yet projected, and the ledger, instead of every event since it started.
//
// Off keeps a live run's projected rows until the next start, when Recover forgets them in bounded
// steps of a few thousand rows, each its own transaction; `outbox pending --all` can show them until
// then. Either way a run all of whose rows are forgotten is no longer listed by AllRuns and
// `outbox stats` (its figures are kept: Projected, EventsUsed and Store.Totals still know it).
func WithForgetProjected(on bool) RelayOption {
	return func(c *relayConfig) error {
		c.forget = on
		return nil
	}
}

// SinkAppend is one call of the sink's Append as a relay made it, told to a SinkObserver.
type SinkAppend struct {
	RunID   string
	Lines   int           // the batch's lines
	Bytes   int           // the batch's bytes of lines, newlines not counted
	Elapsed time.Duration // how long Append took
	// Err is what Append returned: nil once the sink has the batch, an error wrapping ErrSinkRefused
	// for a batch the sink refuses (the run stops), any other for a failure the relay retries.
	Err error
}

// SinkObserver hears of every append a relay makes to its sink, for the sink's latency, batch sizes
// and errors: package github.com/textmachine/outbox/metrics implements it with Prometheus histograms,
// so that this module does not depend on a metrics library. ObserveAppend runs on the relay's
// goroutine, after Append returns and before the batch is recorded, so it must not block.
type SinkObserver interface {
	ObserveAppend(a SinkAppend)
}

// WithSinkObserver sets an observer of the relay's appends to its sink (see SinkObserver). Flush and
// Recover report through it too. Without it the relay measures nothing.
func WithSinkObserver(o SinkObserver) RelayOption {
	return func(c *relayConfig) error {
		if o == nil {
			return errors.New("outbox: nil sink observer")
		}
		c.observer = o
		return nil
	}
}
