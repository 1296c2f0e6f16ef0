// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/textmachine/outbox/internal/litedb"
)

// Defaults, chosen so that an inbox needs no options.
const (
	// DefaultDigestWindow is how many of a run's last lines keep their digest: more than a
	// relay re-sends at a crash (the two batches in flight, 512 lines with its default batches).
	DefaultDigestWindow = 4096
	// DefaultDigestRetention is how long a run may receive nothing before it keeps only its last
	// line's digest.
	DefaultDigestRetention = 24 * time.Hour
	DefaultBusyTimeout     = 5 * time.Second
	DefaultReadPoolSize    = 4
	// DefaultMaxLineSize is the journal's own limit on a line.
	DefaultMaxLineSize = litedb.DefaultMaxLineSize
	// DefaultBatchLines and DefaultBatchBytes bound one batch a source reads and applies in one
	// transaction; DefaultPollInterval is how often a follower looks at its source when nothing woke
	// it.
	DefaultBatchLines   = 1024
	DefaultBatchBytes   = 4 << 20
	DefaultPollInterval = time.Second
)

// Limits of the options.
const (
	MaxDigestWindow  = 1 << 20
	MaxLineSizeLimit = litedb.MaxLineSizeLimit
)

type config struct {
	window      int64
	retention   time.Duration
	durability  Durability
	busyTimeout time.Duration
	readPool    int
	logger      *slog.Logger
	maxLine     int
	batchLines  int
	batchBytes  int
	poll        time.Duration
	operator    string
	vfs         string
	batchHook   func(source string, r Report)
	handlerCtx  HandlerContextFunc
	now         func() time.Time
	savepoint   string // the name of the savepoint around each line, when a test must know it
	retry       *retryPolicy
	readerName  string // WithReaderName's; "": derived from the database (readerName)
}

func newConfig(opts []Option) (config, error) {
	c := config{
		window:      DefaultDigestWindow,
		retention:   DefaultDigestRetention,
		durability:  DurabilityFull,
		busyTimeout: DefaultBusyTimeout,
		readPool:    DefaultReadPoolSize,
		logger:      slog.New(slog.DiscardHandler),
		maxLine:     DefaultMaxLineSize,
		batchLines:  DefaultBatchLines,
		batchBytes:  DefaultBatchBytes,
		poll:        DefaultPollInterval,
		now:         time.Now,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	if c.batchBytes < c.maxLine {
		// A batch must be able to hold the longest line, or a source could never pass it.
		c.batchBytes = c.maxLine
	}
	return c, nil
}

// Option configures Open. An option given an invalid value makes Open fail.
type Option func(*config) error

// WithDigestWindow sets how many of each run's last applied lines keep their SHA-256 digest (the
// default is DefaultDigestWindow, 4,096; 1 to MaxDigestWindow). A line at or below the high-water
// mark within the window is a duplicate with the same bytes and a conflict with others; one older
// than the window (seq ≤ high-water mark − n) is Stale. Raising it across a reopen leaves the seqs
// whose digests were already dropped Stale; lowering it drops a run's digests past the new window
// within the next 16 lines the run applies (or at its retention trim).
func WithDigestWindow(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxDigestWindow {
			return fmt.Errorf("inbox: digest window %d, need 1 to %d", n, MaxDigestWindow)
		}
		c.window = int64(n)
		return nil
	}
}

// WithDigestRetention sets how long a run may receive nothing before its digests are dropped but its
// last line's (the default is DefaultDigestRetention, 24 hours): the tables then grow with the runs
// that are active, not with every run ever seen. The trimming is done a bounded amount per call.
func WithDigestRetention(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("inbox: digest retention %v, need more than 0", d)
		}
		c.retention = d
		return nil
	}
}

// Durability is what a commit survives when the call that made it returns: the same type, and the
// same values, as outbox.Durability.
type Durability = litedb.Durability

const (
	// DurabilityFull (the default) makes every call durable on return: one WAL sync per call.
	DurabilityFull = litedb.DurabilityFull
	// DurabilityNormal can lose the last calls to a power failure; the sources then read them again,
	// since their positions are lost with them.
	DurabilityNormal = litedb.DurabilityNormal
)

// WithDurability sets what a commit survives when the call that made it returns (see Durability;
// outbox.DurabilityFull and outbox.DurabilityNormal are the same values). The default,
// DurabilityFull, makes every call durable on return: one WAL sync per call. DurabilityNormal can
// lose the last calls to a power failure; the sources then read them again, since their positions
// are lost with them.
func WithDurability(d Durability) Option {
	return func(c *config) error {
		if d != DurabilityFull && d != DurabilityNormal {
			return fmt.Errorf("inbox: unknown durability %v", d)
		}
		c.durability = d
		return nil
	}
}

// WithBusyTimeout sets how long a statement waits for a lock another connection holds (a checkpoint,
// an external tool) before failing with SQLITE_BUSY. Zero fails at once. The default is 5s.
func WithBusyTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("inbox: negative busy timeout %v", d)
		}
		c.busyTimeout = d
		return nil
	}
}

// WithReadPoolSize sets the number of read connections (Position, Quarantined, SourcePosition,
// Sources). The default is 4.
func WithReadPoolSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("inbox: read pool size %d, need at least 1", n)
		}
		c.readPool = n
		return nil
	}
}

// WithLogger sets the logger. The inbox logs nothing unless given one; given one, it logs each
// quarantine, release and accepted gap.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("inbox: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithMaxLineSize bounds one line, in bytes, without its newline: a longer line is malformed. The
// default is DefaultMaxLineSize, the journal's own limit; at most MaxLineSizeLimit.
func WithMaxLineSize(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxLineSizeLimit {
			return fmt.Errorf("inbox: max line size %d, need 1 to %d", n, MaxLineSizeLimit)
		}
		c.maxLine = n
		return nil
	}
}

// WithBatchLines bounds how many lines a source applies in one transaction (the default is
// DefaultBatchLines). Apply itself takes what it is given.
func WithBatchLines(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("inbox: batch of %d lines, need at least 1", n)
		}
		c.batchLines = n
		return nil
	}
}

// WithBatchBytes bounds how many bytes of lines a source holds and applies in one transaction (the
// default is DefaultBatchBytes); it is raised to the line limit, so that the longest line fits.
func WithBatchBytes(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("inbox: batch of %d bytes, need at least 1", n)
		}
		c.batchBytes = n
		return nil
	}
}

// WithPollInterval sets how often a source that follows a file or a stream looks at it when no
// notification woke it (the default is DefaultPollInterval): a lost notification costs at most this
// much latency.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("inbox: poll interval %v, need more than 0", d)
		}
		c.poll = d
		return nil
	}
}

// WithOperator names who AcceptGap records as having accepted a gap. The default is the operating
// system's user running the process.
func WithOperator(name string) Option {
	return func(c *config) error {
		if err := checkName("operator", name, 256); err != nil {
			return err
		}
		c.operator = name
		return nil
	}
}

// WithVFS opens the database through the SQLite VFS registered under name with
// github.com/ncruces/go-sqlite3/vfs (an encrypting VFS, or one that injects faults in tests), as
// the outbox's WithVFS does for a book. The default is the driver's own, which uses the operating
// system's files and locks.
func WithVFS(name string) Option {
	return func(c *config) error {
		if name == "" {
			return fmt.Errorf("inbox: empty VFS name")
		}
		c.vfs = name
		return nil
	}
}

// WithBatchHook sets fn to be called after each batch a source commits: each call of ApplyFrom that
// returns no error, so each batch ApplyFile and FollowFile apply (those return no Report per batch,
// and FollowFile none at all), with the source's name and that batch's Report. It is called on the
// caller's goroutine after the commit, outside the write transaction, so it may read the inbox; it
// delays the source's next batch by its own duration, and its panic reaches the caller with the
// batch committed. A crash between the commit and the call loses the call, never the batch: counts
// summed from it can fall short of what is committed, never exceed it. Apply, which has no source,
// does not call it.
func WithBatchHook(fn func(source string, r Report)) Option {
	return func(c *config) error {
		if fn == nil {
			return fmt.Errorf("inbox: nil batch hook")
		}
		c.batchHook = fn
		return nil
	}
}

// The bounds a source reads in, for the sources in this package.
func (in *Inbox) maxLineSize() int            { return in.cfg.maxLine }
func (in *Inbox) batchLines() int             { return in.cfg.batchLines }
func (in *Inbox) batchBytes() int             { return in.cfg.batchBytes }
func (in *Inbox) pollInterval() time.Duration { return in.cfg.poll }
func (in *Inbox) logger() *slog.Logger        { return in.cfg.logger }

// retryPolicy is WithRetry's: how many times a failed handler runs again, and how long before each.
type retryPolicy struct {
	n       int
	backoff func(attempt int) time.Duration
}

// wait waits the backoff before the given retry (1 for the first), or until ctx ends.
func (p *retryPolicy) wait(ctx context.Context, attempt int) error {
	var d time.Duration
	if p.backoff != nil {
		d = p.backoff(attempt)
	}
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// MaxRetries bounds WithRetry's n.
const MaxRetries = 1000

// WithRetry turns a handler error (other than one wrapping ErrQuarantine) from a stop of the whole
// call into a quarantine of the line's run alone: the line's writes are undone and the handler runs
// again for the same line, after backoff(1), backoff(2), … (nil or a duration ≤ 0: at once), up to n
// more times (0 to MaxRetries). When the last attempt fails too, the run is quarantined ("handler",
// its Detail naming the number of attempts and the last error) and the call goes on with the other
// runs, whose lines apply as they would have. An operator's Release then applies the line again.
//
// Without it (the default), a handler error stops the call with nothing committed, every run with
// it: fail-stop, the safe choice when any failure may be a bug that a quarantine would only hide.
// WithRetry suits handlers whose errors are transient (a lookup in another service) or belong to one
// run's data.
//
// The retry runs inside the call, in the line's savepoint, holding the call's transaction and the
// inbox's writer: the lines before it in the call stay applied, and the backoff delays every later
// line and every other call (Close waits for it). Keep it short; a context that ends during the
// backoff fails the call at once, with nothing of it stored. A handler's error while the call's
// context has ended is not retried: the call fails as without WithRetry, and no run is quarantined.
// A panic is never retried.
func WithRetry(n int, backoff func(attempt int) time.Duration) Option {
	return func(c *config) error {
		if n < 0 || n > MaxRetries {
			return fmt.Errorf("inbox: %d retries, need 0 to %d", n, MaxRetries)
		}
		c.retry = &retryPolicy{n: n, backoff: backoff}
		return nil
	}
}
