// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/textmachine/outbox/internal/litedb"
)

// Durability is what a commit survives when the call that made it returns. The inbox takes the same
// values.
type Durability = litedb.Durability

const (
	// DurabilityFull (the default) makes every commit durable before it returns, as
	// synchronous=FULL does: the WAL is synced after the commit and before the call returns. The
	// store makes that sync itself, outside SQLite's write lock, so that concurrent commits share it.
	DurabilityFull = litedb.DurabilityFull
	// DurabilityNormal (synchronous=NORMAL) syncs the WAL only at checkpoints. A commit survives a
	// process crash but can be lost to power failure, after the relay may already have written its
	// line to the journal: the journal would then claim an event the database no longer has. Opt in
	// only when the database is not the ledger of record.
	DurabilityNormal = litedb.DurabilityNormal
)

// Defaults, chosen so that a store needs no options.
const (
	DefaultBusyTimeout  = 5 * time.Second
	DefaultOpTimeout    = 30 * time.Second
	DefaultReadPoolSize = 4
	// DefaultMaxLineSize bounds one stored line (WithMaxLineSize). The journal's Append and Verify
	// apply the same bound by default, so a line the store accepts is a line the journal accepts.
	DefaultMaxLineSize = litedb.DefaultMaxLineSize
	// DefaultWALSizeLimit is what the WAL file is cut back to after a checkpoint (WithWALSizeLimit).
	DefaultWALSizeLimit = 64 << 20
)

type config struct {
	durability  Durability
	busyTimeout time.Duration
	opTimeout   time.Duration
	readPool    int
	logger      *slog.Logger
	groupCommit bool
	vfs         string
	maxLine     int
	walLimit    int64
	lineCheck   func(runID string, seq int64, line []byte) error
	// ledgerStep is ledgerStep but for a test, which spans several steps with a small book.
	ledgerStep int
}

func newConfig(opts []Option) (config, error) {
	c := config{
		durability:  DurabilityFull,
		busyTimeout: DefaultBusyTimeout,
		opTimeout:   DefaultOpTimeout,
		readPool:    DefaultReadPoolSize,
		logger:      slog.New(slog.DiscardHandler),
		groupCommit: true,
		maxLine:     DefaultMaxLineSize,
		walLimit:    DefaultWALSizeLimit,
		ledgerStep:  ledgerStep,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// Option configures Open and OpenReadOnly. An option given an invalid value makes Open fail.
type Option func(*config) error

// WithDurability sets the synchronous level; see Durability. The default is DurabilityFull.
func WithDurability(d Durability) Option {
	return func(c *config) error {
		if d != DurabilityFull && d != DurabilityNormal {
			return fmt.Errorf("outbox: unknown durability %v", d)
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
			return fmt.Errorf("outbox: negative busy timeout %v", d)
		}
		c.busyTimeout = d
		return nil
	}
}

// WithOpTimeout bounds each operation whose context has no deadline, so a stuck database cannot hang a
// caller that passed context.Background. Zero disables it. The default is 30s.
func WithOpTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("outbox: negative operation timeout %v", d)
		}
		c.opTimeout = d
		return nil
	}
}

// WithReadPoolSize sets the number of read connections (PendingEvents, EventsUsed, AnnouncedOnceKeys).
// Writes always use the one writer connection. The default is 4.
func WithReadPoolSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("outbox: read pool size %d, need at least 1", n)
		}
		c.readPool = n
		return nil
	}
}

// MaxLineSizeLimit is the largest line limit the store's WithMaxLineSize accepts. SQLite holds a line
// whole in the connection's memory while it writes or reads it, and the driver gives each connection
// a fixed amount; lines up to this size go through one after another with room to spare. It is not
// journal.MaxLineSizeLimit (1 GiB), the largest limit a journal's reader (journal.WithMaxLineSize)
// can be given: a reader bounded only by its own memory may be asked to check lines that no store
// here could hold, written by another writer; the two bound different things.
const MaxLineSizeLimit = litedb.MaxLineSizeLimit

// WithMaxLineSize bounds the length of one line, in bytes, in every enqueue method: a longer line is
// ErrInvalidLine, checked before it is written, and nothing of the call is stored. The default is
// DefaultMaxLineSize (16 MiB); at most MaxLineSizeLimit. journal.File refuses a line over
// DefaultMaxLineSize whatever this says, and a relay stops at such a line (ErrSinkRefused): raise the
// limit only for a sink that takes larger lines.
func WithMaxLineSize(n int) Option {
	return func(c *config) error {
		if n < 1 || n > MaxLineSizeLimit {
			return fmt.Errorf("outbox: max line size %d, need 1 to %d", n, MaxLineSizeLimit)
		}
		c.maxLine = n
		return nil
	}
}

// WithWALSizeLimit sets the size, in bytes, that the WAL file is cut back to each time SQLite starts it
// over after a checkpoint (SQLite's journal_size_limit). Without it a WAL that a long read transaction
// made large (nothing can be checkpointed past a reader's snapshot) keeps its size on disk until the
// store is closed. The default is DefaultWALSizeLimit (64 MiB); 0 cuts the file to nothing each time.
func WithWALSizeLimit(n int64) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("outbox: negative WAL size limit %d", n)
		}
		c.walLimit = n
		return nil
	}
}

// WithLogger sets the logger. The store logs nothing unless given one.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("outbox: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithGroupCommit turns group commit on or off (on by default). With it, concurrent EnqueueEvent and
// EnqueueOnce calls share one transaction, each returning once that commit is durable; builders then run on the store's committer goroutine, one after another, so a slow builder
// delays the calls grouped after it. Off, each call has a transaction of its own, on its own goroutine.
// A lone caller pays the same either way (docs/BENCHMARKS.md).
func WithGroupCommit(on bool) Option {
	return func(c *config) error {
		c.groupCommit = on
		return nil
	}
}

// WithVFS opens the database through the SQLite VFS registered under name with
// github.com/ncruces/go-sqlite3/vfs (an encrypting VFS, or one that injects faults in tests). The
// default is the driver's own, which uses the operating system's files and locks.
func WithVFS(name string) Option {
	return func(c *config) error {
		if name == "" {
			return fmt.Errorf("outbox: empty VFS name")
		}
		c.vfs = name
		return nil
	}
}

// WithLineCheck has every enqueue check each line its builder renders, inside the enqueue and after
// the builder, with check(runID, seq, line): a line it refuses fails that call alone, with an error
// wrapping both ErrInvalidLine and check's own, and nothing of the call is stored (its seq is not
// consumed). It applies to every enqueue method, grouped or not, and to EnqueueTx and EnqueueOnceTx.
// journal.CheckLine is the journal's check: a line keyed by exactly its run and seq, within the
// journal's limit. Without it the store keeps lines opaque and the sink is the first to read them,
// where a wrong line stops the run's projection (ErrSinkRefused). check runs inside the write
// transaction, on the committer goroutine with group commit, so it must be quick and must not call
// the store; a panic of its own is the caller's, as a builder's is.
func WithLineCheck(check func(runID string, seq int64, line []byte) error) Option {
	return func(c *config) error {
		if check == nil {
			return fmt.Errorf("outbox: nil line check")
		}
		c.lineCheck = check
		return nil
	}
}
