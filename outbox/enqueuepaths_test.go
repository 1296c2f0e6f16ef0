// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// callerPanic is a panic value of the caller's own type: the caller must get it back as it is, not
// inside a value of the store's.
type callerPanic struct{ n int }

// recoverPanic runs fn and returns what it panicked with, or nil.
func recoverPanic(fn func()) (v any) {
	defer func() { v = recover() }()
	fn()
	return nil
}

// foreignDB opens the store's file on the caller's own *sql.DB, as an application that keeps its own
// tables beside the outbox would, and applies the outbox migrations with Migrate.
func foreignDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	d, err := sql.Open("sqlite3", "file:"+path+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	d.SetMaxOpenConns(1)
	t.Cleanup(func() { d.Close() })
	if err := outbox.Migrate(context.Background(), d); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return d
}

var foreignDBs sync.Map // path -> *sql.DB

// foreignDBOf is foreignDB, opened once per store file.
func foreignDBOf(t *testing.T, path string) *sql.DB {
	if d, ok := foreignDBs.Load(path); ok {
		return d.(*sql.DB)
	}
	d := foreignDB(t, path)
	if prev, loaded := foreignDBs.LoadOrStore(path, d); loaded {
		return prev.(*sql.DB)
	}
	t.Cleanup(func() { foreignDBs.Delete(path) })
	return d
}

// enqueuePath is one way of enqueueing a single event, so that a test can run the same case through
// every path.
type enqueuePath struct {
	name string
	opts []outbox.Option
	// enqueue enqueues one event to run r with build and returns what the caller is told.
	enqueue func(t *testing.T, s *outbox.Store, path string, ctx context.Context, build outbox.EventBuilder) (int64, error)
}

var enqueuePaths = []enqueuePath{
	{"EnqueueEvent/group", nil, func(_ *testing.T, s *outbox.Store, _ string, ctx context.Context, b outbox.EventBuilder) (int64, error) {
		return s.EnqueueEvent(ctx, "r", b)
	}},
	{"EnqueueEvent/nogroup", []outbox.Option{outbox.WithGroupCommit(false)}, func(_ *testing.T, s *outbox.Store, _ string, ctx context.Context, b outbox.EventBuilder) (int64, error) {
		return s.EnqueueEvent(ctx, "r", b)
	}},
	{"EnqueueOnce/group", nil, func(_ *testing.T, s *outbox.Store, _ string, ctx context.Context, b outbox.EventBuilder) (int64, error) {
		_, seq, err := s.EnqueueOnce(ctx, "r", fmt.Sprintf("k-%d", time.Now().UnixNano()), b)
		return seq, err
	}},
	{"EnqueueOnce/nogroup", []outbox.Option{outbox.WithGroupCommit(false)}, func(_ *testing.T, s *outbox.Store, _ string, ctx context.Context, b outbox.EventBuilder) (int64, error) {
		_, seq, err := s.EnqueueOnce(ctx, "r", fmt.Sprintf("k-%d", time.Now().UnixNano()), b)
		return seq, err
	}},
	{"EnqueueEvents", nil, func(_ *testing.T, s *outbox.Store, _ string, ctx context.Context, b outbox.EventBuilder) (int64, error) {
		seqs, err := s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{b})
		if len(seqs) == 0 {
			return 0, err
		}
		return seqs[0], err
	}},
	{"EnqueueTx/WriteTx", nil, func(_ *testing.T, s *outbox.Store, _ string, ctx context.Context, b outbox.EventBuilder) (seq int64, err error) {
		// The caller's transaction goes on after a failed EnqueueTx and commits: the event must
		// be stored exactly when EnqueueTx said so.
		werr := s.WriteTx(context.Background(), func(tx *sql.Tx) error {
			seq, err = s.EnqueueTx(ctx, tx, "r", b)
			return nil
		})
		if err == nil && werr != nil {
			return 0, werr
		}
		return seq, err
	}},
	{"EnqueueTx/foreign", nil, func(t *testing.T, s *outbox.Store, path string, ctx context.Context, b outbox.EventBuilder) (seq int64, err error) {
		d := foreignDBOf(t, path)
		tx, terr := d.BeginTx(context.Background(), nil)
		if terr != nil {
			t.Fatal(terr)
		}
		defer tx.Rollback()
		seq, err = s.EnqueueTx(ctx, tx, "r", b)
		if cerr := tx.Commit(); err == nil && cerr != nil {
			return 0, cerr
		}
		return seq, err
	}},
}

// checkDense checks that run r holds exactly seqs 1..n, and returns n.
// outcomes are what each call of a test was told, by call id, to be held against what is stored.
type outcomes struct {
	mu  sync.Mutex
	got map[string]outcome
}

type outcome struct {
	seq int64
	err error
}

func newOutcomes() *outcomes { return &outcomes{got: map[string]outcome{}} }

func (o *outcomes) record(id string, seq int64, err error) {
	o.mu.Lock()
	o.got[id] = outcome{seq, err}
	o.mu.Unlock()
}

func (o *outcomes) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.got)
}

// check holds every call to what it was told against stored, the seq each call id's line is stored
// at: a call told a seq is stored there, a call told an error is not stored and was given no seq
// (ErrNotDurable excepted, whose commit was made). It returns how many calls were acknowledged.
func (o *outcomes) check(t *testing.T, stored map[string]int64) (acknowledged int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, c := range o.got {
		at, ok := stored[id]
		notDurable := errors.Is(c.err, outbox.ErrNotDurable)
		switch {
		case c.err == nil && (!ok || at != c.seq):
			t.Errorf("%s was told seq %d, stored at %d (stored: %v)", id, c.seq, at, ok)
		case c.err != nil && !notDurable && ok:
			t.Errorf("%s was told %v, but is stored at %d", id, c.err, at)
		case c.err != nil && !notDurable && c.seq != 0:
			t.Errorf("%s was told seq %d with the error %v", id, c.seq, c.err)
		case c.err == nil:
			acknowledged++
		}
	}
	return acknowledged
}

// onEveryPath runs check once per enqueue path, each on a fresh store whose run "r" holds one event.
func onEveryPath(t *testing.T, check func(t *testing.T, p enqueuePath, s *outbox.Store, path string)) {
	for _, p := range enqueuePaths {
		t.Run(p.name, func(t *testing.T) {
			s, path := outboxtest.Setup(t, p.opts...)
			outboxtest.MustEnqueue(t, s, "r")
			check(t, p, s, path)
		})
	}
}

func checkDense(t *testing.T, s *outbox.Store, want int64) {
	t.Helper()
	got := outboxtest.SeqsOf(outboxtest.AllLines(t, s, "r"))
	if len(got) != int(want) {
		t.Fatalf("run r holds seqs %v, want 1..%d", got, want)
	}
	for i, seq := range got {
		if seq != int64(i+1) {
			t.Fatalf("run r holds seqs %v, want 1..%d with no number used", got, want)
		}
	}
}
