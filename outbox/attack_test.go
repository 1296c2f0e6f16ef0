// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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

// enqueuePath is one way of enqueueing a single event, so that a test can run the same attack through
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

// TestABuilderPanicReachesTheCallerWithItsOwnValueOnEveryPath: whichever path ran the builder (the
// caller's goroutine, the committer's, a batch, the caller's own transaction or WriteTx's), the caller
// recovers its own value, nothing is stored, no number is used and the store keeps working.
func TestABuilderPanicReachesTheCallerWithItsOwnValueOnEveryPath(t *testing.T) {
	onEveryPath(t, func(t *testing.T, p enqueuePath, s *outbox.Store, path string) {
		ctx := context.Background()
		v := recoverPanic(func() {
			p.enqueue(t, s, path, ctx, func(int64) ([]byte, error) { panic(callerPanic{7}) })
		})
		if v != (callerPanic{7}) {
			t.Fatalf("recovered %#v, want the builder's own callerPanic{7}", v)
		}
		seq, err := p.enqueue(t, s, path, ctx, outboxtest.LineOf("after"))
		if err != nil || seq != 2 {
			t.Fatalf("the enqueue after the panic: seq %d, %v; want 2, nil", seq, err)
		}
		checkDense(t, s, 2)
	})
}

// TestADecliningOrFailingBuilderUsesNoNumberOnEveryPath: a nil line stores nothing and returns 0 with
// no error; an error is returned wrapped, with 0; either way the next event takes the next number.
func TestADecliningOrFailingBuilderUsesNoNumberOnEveryPath(t *testing.T) {
	onEveryPath(t, func(t *testing.T, p enqueuePath, s *outbox.Store, path string) {
		ctx := context.Background()
		seq, err := p.enqueue(t, s, path, ctx, outboxtest.ConstLine(nil))
		if seq != 0 || err != nil {
			t.Errorf("declining builder: seq %d, %v; want 0, nil", seq, err)
		}
		seq, err = p.enqueue(t, s, path, ctx, func(int64) ([]byte, error) { return nil, outboxtest.ErrRender })
		if seq != 0 || !errors.Is(err, outboxtest.ErrRender) {
			t.Errorf("failing builder: seq %d, %v; want 0, the builder's error", seq, err)
		}
		if err != nil && strings.Count(err.Error(), "outbox:") > 1 {
			t.Errorf("failing builder: %q names the package more than once", err)
		}
		seq, err = p.enqueue(t, s, path, ctx, func(int64) ([]byte, error) { return []byte("two\nlines"), nil })
		if seq != 0 || !errors.Is(err, outbox.ErrInvalidLine) {
			t.Errorf("invalid line: seq %d, %v; want 0, ErrInvalidLine", seq, err)
		}
		seq, err = p.enqueue(t, s, path, ctx, outboxtest.LineOf("after"))
		if seq != 2 || err != nil {
			t.Fatalf("next enqueue: seq %d, %v; want 2, nil", seq, err)
		}
		checkDense(t, s, 2)
	})
}

// TestAContextCancelledInsideTheBuilderStoresNothingOnEveryPath: the caller is told its context ended,
// and nothing of the call is stored, even where the transaction around it commits.
func TestAContextCancelledInsideTheBuilderStoresNothingOnEveryPath(t *testing.T) {
	onEveryPath(t, func(t *testing.T, p enqueuePath, s *outbox.Store, path string) {
		ctx, cancel := context.WithCancel(context.Background())
		seq, err := p.enqueue(t, s, path, ctx, func(seq int64) ([]byte, error) {
			cancel()
			return fmt.Appendf(nil, "cancelled %d", seq), nil
		})
		if seq != 0 || !errors.Is(err, context.Canceled) {
			t.Errorf("seq %d, %v; want 0, context.Canceled", seq, err)
		}
		seq, err = p.enqueue(t, s, path, ctx, outboxtest.LineOf("x"))
		if seq != 0 || !errors.Is(err, context.Canceled) {
			t.Errorf("already cancelled: seq %d, %v; want 0, context.Canceled", seq, err)
		}
		if seq, err := p.enqueue(t, s, path, context.Background(), outboxtest.LineOf("after")); seq != 2 || err != nil {
			t.Fatalf("next enqueue: seq %d, %v; want 2, nil", seq, err)
		}
		checkDense(t, s, 2)
	})
}

// TestShortDeadlinesNeverStoreAFailedCallOrLoseAnAcknowledgedOne: calls with deadlines of 0 to 2 ms and
// a small operation timeout, on every path: a call told it succeeded is stored under its seq with its
// line; a call told it failed is not stored; the numbers stay dense.
func TestShortDeadlinesNeverStoreAFailedCallOrLoseAnAcknowledgedOne(t *testing.T) {
	for _, p := range enqueuePaths {
		t.Run(p.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "book.db")
			// Open's own context has a deadline, so the small operation timeout bounds the calls,
			// not Open's migrations on a loaded machine.
			octx, ocancel := context.WithTimeout(context.Background(), time.Minute)
			s, err := outbox.Open(octx, path, append([]outbox.Option{outbox.WithOpTimeout(time.Millisecond)}, p.opts...)...)
			ocancel()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			foreignDBOf(t, path) // migrated before the deadlines start
			calls := 60
			got := newOutcomes()
			var wg sync.WaitGroup
			for w := 0; w < 3; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < calls/3; i++ {
						id := fmt.Sprintf("w%d-c%d", w, i)
						// Deadlines of 0, 1 and 2 ms, and none: then the operation timeout bounds
						// the call.
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%4)*time.Millisecond)
						if i%4 == 3 {
							ctx, cancel = context.WithCancel(context.Background())
						}
						seq, err := p.enqueue(t, s, path, ctx, func(seq int64) ([]byte, error) {
							return fmt.Appendf(nil, "%s %d", id, seq), nil
						})
						cancel()
						got.record(id, seq, err)
					}
				}()
			}
			wg.Wait()
			stored := map[string]int64{}
			rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
			defer rcancel()
			lines, err := s.PendingEvents(rctx, "r", 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range lines {
				if l.Seq != int64(i+1) {
					t.Fatalf("seqs %v are not dense", outboxtest.SeqsOf(lines))
				}
				id, seq, ok := strings.Cut(string(l.Line), " ")
				if !ok || seq != fmt.Sprint(l.Seq) {
					t.Fatalf("line %d is %q", l.Seq, l.Line)
				}
				stored[id] = l.Seq
			}
			t.Logf("%d of %d calls stored", got.check(t, stored), got.len())
		})
	}
}

// TestAGroupWithOneRefusedLargeLineCommitsTheOthersAndLeavesNoLineBehind: several callers of large
// lines share groups, and a trigger refuses every row of one run. Those calls alone fail, the others
// are stored, and events_lines holds exactly the stored events' lines.
func TestAGroupWithOneRefusedLargeLineCommitsTheOthersAndLeavesNoLineBehind(t *testing.T) {
	s, path := outboxtest.Setup(t)
	ctx := context.Background()
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TRIGGER refuse_bad BEFORE INSERT ON events_outbox
			WHEN NEW.engine_run_id = 'bad' BEGIN SELECT RAISE(ABORT, 'refused'); END`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		run := "r"
		if w%4 == 0 {
			run = "bad"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				seq, err := s.EnqueueEvent(ctx, run, func(seq int64) ([]byte, error) {
					return []byte(strings.Repeat("x", 600+int(seq))), nil
				})
				if run == "bad" && (err == nil || seq != 0) {
					t.Errorf("a refused call returned seq %d, %v", seq, err)
				}
				if run == "r" && err != nil {
					t.Errorf("a call grouped with refused ones failed: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	lines := outboxtest.AllLines(t, s, "r")
	if len(lines) != 60 {
		t.Fatalf("%d lines stored, want 60", len(lines))
	}
	for i, l := range lines {
		if l.Seq != int64(i+1) || len(l.Line) != 600+int(l.Seq) {
			t.Errorf("line %d: seq %d with %d bytes", i+1, l.Seq, len(l.Line))
		}
	}
	if n := len(outboxtest.AllLines(t, s, "bad")); n != 0 {
		t.Errorf("run bad holds %d lines", n)
	}
	var spilled int
	if err := outboxtest.RawDB(t, path).QueryRow(`SELECT count(*) FROM events_lines`).Scan(&spilled); err != nil {
		t.Fatal(err)
	}
	if spilled != 60 {
		t.Errorf("events_lines holds %d lines for 60 stored events", spilled)
	}
}

// failingOn is a sink that fails the Append calls whose numbers (from 1) it is given, and keeps the
// lines of every other one.
type failingOn struct {
	outboxtest.MemSink
	mu    sync.Mutex
	calls int
	fail  map[int]bool
}

func (f *failingOn) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	f.mu.Lock()
	f.calls++
	fail := f.fail[f.calls]
	f.mu.Unlock()
	if fail {
		return outboxtest.ErrSinkDown
	}
	return f.MemSink.Append(ctx, runID, lines)
}

// TestASinkFailingOnTheSecondAndThirdBatchesGetsEveryLineOnceInOrder: with batches of one line, the
// first batch read directly, the second as the reader ahead starts, the third from the reader ahead;
// failing the 2nd and 3rd appends, while more lines are enqueued during the drain, neither skips nor
// repeats a line, and Flush returns once everything before it is in the sink.
func TestASinkFailingOnTheSecondAndThirdBatchesGetsEveryLineOnceInOrder(t *testing.T) {
	for _, batchBytes := range []int{1, 40, 100} {
		t.Run(fmt.Sprint(batchBytes), func(t *testing.T) {
			s, _ := outboxtest.Setup(t)
			ctx := context.Background()
			for range 10 {
				outboxtest.MustEnqueue(t, s, "r")
			}
			sink := &failingOn{MemSink: *outboxtest.NewMemSink(), fail: map[int]bool{2: true, 3: true}}
			r := outboxtest.FastRelay(t, s, sink, "r", outbox.WithBatchBytes(batchBytes), outbox.WithFlushAttempts(3), outbox.WithForgetProjected(false))
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range 10 {
					outboxtest.MustEnqueue(t, s, "r")
				}
			}()
			if err := r.Flush(ctx); err != nil {
				t.Fatalf("Flush: %v", err)
			}
			// Flush's target is at least the ten lines committed before it.
			if got, err := s.Projected(ctx, "r"); err != nil || got < 10 {
				t.Fatalf("Projected = %d, %v after Flush; want at least 10", got, err)
			}
			<-done
			if err := r.Flush(ctx); err != nil {
				t.Fatalf("second Flush: %v", err)
			}
			got := sink.All()
			want := outboxtest.AllLines(t, s, "r")
			if len(got) != 20 || len(want) != 20 {
				t.Fatalf("sink has %v, store %v; want 1..20 in each", outboxtest.SeqsOf(got), outboxtest.SeqsOf(want))
			}
			for i := range got {
				if got[i].Seq != int64(i+1) || string(got[i].Line) != string(want[i].Line) {
					t.Fatalf("sink line %d is %d %q, want %d %q", i, got[i].Seq, got[i].Line, want[i].Seq, want[i].Line)
				}
			}
		})
	}
}

// TestErrorChainsFromEveryPathNameThePackageAtMostOnce: the errors a caller gets from the relay's
// methods, from each enqueue path and from Open, when what fails is deep inside (the sink, a builder, a
// line, a closed store, the file), never name the package twice.
func TestErrorChainsFromEveryPathNameThePackageAtMostOnce(t *testing.T) {
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	outboxtest.MustEnqueue(t, s, "r")
	bad := func(int64) ([]byte, error) { return []byte("a\nb"), nil }
	fail := func(int64) ([]byte, error) { return nil, outboxtest.ErrRender }
	sink := outboxtest.NewMemSink()
	sink.SetFailing(true)
	relay := outboxtest.FastRelay(t, s, sink, "r", outbox.WithFlushAttempts(2))
	errs := map[string]error{}
	errs["Flush"] = relay.Flush(ctx)
	// A bound for a Run that would not stop, not the refusal's: ended first, it would test the
	// context's error instead.
	rctx, cancel := context.WithTimeout(ctx, liveness)
	errs["Run"] = outboxtest.FastRelay(t, s, &refusingSink{}, "r").Run(rctx)
	cancel()
	_, errs["EnqueueEvent line"] = s.EnqueueEvent(ctx, "r", bad)
	_, errs["EnqueueEvent build"] = s.EnqueueEvent(ctx, "r", fail)
	_, _, errs["EnqueueOnce build"] = s.EnqueueOnce(ctx, "r", "k", fail)
	_, errs["EnqueueEvents line"] = s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{outboxtest.LineOf("x"), bad})
	_, errs["EnqueueEvents build"] = s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{fail})
	errs["WriteTx EnqueueTx"] = s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := s.EnqueueTx(ctx, tx, "r", bad)
		return err
	})
	ftx, err := foreignDB(t, path).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, errs["foreign EnqueueTx"] = s.EnqueueTx(ctx, ftx, "r", fail)
	ftx.Rollback()
	_, errs["Open a directory"] = outbox.Open(ctx, t.TempDir())
	noDB := filepath.Join(t.TempDir(), "not.db")
	if err := os.WriteFile(noDB, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs["Open not a database"] = outbox.Open(ctx, noDB)
	s.Close()
	_, errs["EnqueueEvent closed"] = s.EnqueueEvent(ctx, "r", outboxtest.LineOf("x"))
	errs["Flush closed"] = relay.Flush(ctx)
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if n := strings.Count(err.Error(), "outbox:"); n > 1 {
			t.Errorf("%s: %q names the package %d times, want at most once", name, err, n)
		}
	}
}

// TestAPanickingBuilderInAGroupLeavesTheStoreWorking: builders that panic, fail or decline on the
// committer's goroutine, among callers whose builders succeed, cost only their own calls: each panic
// reaches its own caller with its own value, every other call is stored under dense numbers, and the
// store is not broken.
func TestAPanickingBuilderInAGroupLeavesTheStoreWorking(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		stored = map[int64]string{}
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				switch (w + i) % 4 {
				case 0:
					v := recoverPanic(func() {
						s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) { panic(callerPanic{w*100 + i}) })
					})
					if v != (callerPanic{w*100 + i}) {
						t.Errorf("%s recovered %#v, want its own callerPanic{%d}", id, v, w*100+i)
					}
				case 1:
					if seq, err := s.EnqueueEvent(ctx, "r", outboxtest.ConstLine(nil)); seq != 0 || err != nil {
						t.Errorf("%s declined: %d, %v", id, seq, err)
					}
				case 2:
					if seq, err := s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) { return nil, outboxtest.ErrRender }); seq != 0 || !errors.Is(err, outboxtest.ErrRender) {
						t.Errorf("%s failed: %d, %v", id, seq, err)
					}
				default:
					seq, err := s.EnqueueEvent(ctx, "r", func(seq int64) ([]byte, error) { return fmt.Appendf(nil, "%s %d", id, seq), nil })
					if err != nil {
						t.Errorf("%s: %v", id, err)
						continue
					}
					mu.Lock()
					stored[seq] = fmt.Sprintf("%s %d", id, seq)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	lines := outboxtest.AllLines(t, s, "r")
	if len(lines) != len(stored) {
		t.Fatalf("%d lines stored, %d acknowledged", len(lines), len(stored))
	}
	for i, l := range lines {
		if l.Seq != int64(i+1) || string(l.Line) != stored[l.Seq] {
			t.Errorf("line %d is %d %q, want %q", i+1, l.Seq, l.Line, stored[l.Seq])
		}
	}
	if _, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("after")); err != nil {
		t.Fatalf("the store after the panics: %v", err)
	}
}

// TestABatchWithAPanickingFailingOrDecliningBuilderInTheMiddle: EnqueueEvents is all or nothing
// whatever its middle builder does; a decline in the middle takes no number, a panic reaches the
// caller with its own value and the store keeps working.
func TestABatchWithAPanickingFailingOrDecliningBuilderInTheMiddle(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	x := outboxtest.LineOf("x")
	v := recoverPanic(func() {
		s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{x, func(int64) ([]byte, error) { panic(callerPanic{2}) }, x})
	})
	if v != (callerPanic{2}) {
		t.Fatalf("recovered %#v, want callerPanic{2}", v)
	}
	seqs, err := s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{x, func(int64) ([]byte, error) { return nil, outboxtest.ErrRender }, x})
	if seqs != nil || !errors.Is(err, outboxtest.ErrRender) {
		t.Fatalf("failing middle builder: %v, %v", seqs, err)
	}
	ectx, cancel := context.WithCancel(ctx)
	seqs, err = s.EnqueueEvents(ectx, "r", []outbox.EventBuilder{x, func(seq int64) ([]byte, error) { cancel(); return []byte("c"), nil }, x})
	if seqs != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelling middle builder: %v, %v", seqs, err)
	}
	if n := len(outboxtest.AllLines(t, s, "r")); n != 0 {
		t.Fatalf("%d lines stored by failed batches", n)
	}
	seqs, err = s.EnqueueEvents(ctx, "r", []outbox.EventBuilder{x, outboxtest.ConstLine(nil), x})
	if err != nil || fmt.Sprint(seqs) != "[1 0 2]" {
		t.Fatalf("declining middle builder: %v, %v; want [1 0 2]", seqs, err)
	}
	checkDense(t, s, 2)
}

// TestConcurrentEnqueueOnceOfOneKeyAnnouncesItOnce: callers racing with one once key, in one group or
// several, store one row; exactly one is told it announces, and the others get (false, 0, nil).
func TestConcurrentEnqueueOnceOfOneKeyAnnouncesItOnce(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			s, _ := outboxtest.Setup(t, outbox.WithGroupCommit(group))
			ctx := context.Background()
			var (
				wg         sync.WaitGroup
				announcing sync.Map
			)
			for w := 0; w < 16; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, seq, err := s.EnqueueOnce(ctx, "r", "unit-1", outboxtest.LineOf("done"))
					switch {
					case err != nil:
						t.Errorf("EnqueueOnce: %v", err)
					case ok != (seq > 0):
						t.Errorf("EnqueueOnce: %v, %d", ok, seq)
					case ok:
						announcing.Store(w, seq)
					}
				}()
			}
			wg.Wait()
			n := 0
			announcing.Range(func(_, seq any) bool {
				n++
				if seq != int64(1) {
					t.Errorf("announced at seq %v, want 1", seq)
				}
				return true
			})
			if n != 1 {
				t.Errorf("%d callers were told they announce, want 1", n)
			}
			checkDense(t, s, 1)
		})
	}
}

// TestForeignTransactionsRacingTheStoresOwnWritesKeepTheNumbersDense: the caller's own *sql.DB on the
// store's file enqueues through EnqueueTx in deferred and immediate transactions, with short
// deadlines, while the store's own callers enqueue through the group committer. Every call told it
// succeeded is stored under its seq with its line, no call told it failed is, and the numbers stay
// dense.
func TestForeignTransactionsRacingTheStoresOwnWritesKeepTheNumbersDense(t *testing.T) {
	s, path := outboxtest.Setup(t)
	ctx := context.Background()
	open := func(lock string) *sql.DB {
		d, err := sql.Open("sqlite3", "file:"+path+"?_pragma=busy_timeout(5000)&_txlock="+lock)
		if err != nil {
			t.Fatal(err)
		}
		d.SetMaxOpenConns(1)
		t.Cleanup(func() { d.Close() })
		if err := outbox.Migrate(ctx, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	dbs := []*sql.DB{open("deferred"), open("immediate")}
	got := newOutcomes()
	record := got.record
	var wg sync.WaitGroup
	build := func(id string) outbox.EventBuilder {
		return func(seq int64) ([]byte, error) {
			line := fmt.Sprintf("%s %d", id, seq)
			if seq%3 == 0 {
				line += " " + strings.Repeat("L", 600) // stored in events_lines
			}
			return []byte(line), nil
		}
	}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				id := fmt.Sprintf("own%d-%d", w, i)
				seq, err := s.EnqueueEvent(ctx, "r", build(id))
				record(id, seq, err)
			}
		}()
	}
	for k, d := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				id := fmt.Sprintf("foreign%d-%d", k, i)
				cctx, cancel := context.WithTimeout(ctx, time.Duration(i%4)*time.Millisecond)
				tx, err := d.BeginTx(ctx, nil)
				if err != nil {
					cancel()
					record(id, 0, err)
					continue
				}
				seq, err := s.EnqueueTx(cctx, tx, "r", build(id))
				cancel()
				if err != nil {
					tx.Rollback()
				} else if err = tx.Commit(); err != nil {
					seq = 0
				}
				record(id, seq, err)
			}
		}()
	}
	wg.Wait()
	stored := map[string]int64{}
	lines := outboxtest.AllLines(t, s, "r")
	for i, l := range lines {
		if l.Seq != int64(i+1) {
			t.Fatalf("seqs %v are not dense", outboxtest.SeqsOf(lines))
		}
		f := strings.Fields(string(l.Line))
		if len(f) < 2 || f[1] != fmt.Sprint(l.Seq) {
			t.Fatalf("line %d is %.40q", l.Seq, l.Line)
		}
		stored[f[0]] = l.Seq
	}
	t.Logf("%d of %d calls stored", got.check(t, stored), got.len())
	var spilled, want int
	raw := outboxtest.RawDB(t, path)
	if err := raw.QueryRow(`SELECT count(*) FROM events_lines`).Scan(&spilled); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRow(`SELECT count(*) FROM events_outbox WHERE spill <> 0`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if spilled != want {
		t.Errorf("events_lines holds %d lines, events_outbox refers to %d", spilled, want)
	}
}

// TestAHoleReachedByTheReaderAheadStopsTheDrainBeforeIt: rows deleted by hand in the middle of a long
// backlog are met by the reader ahead, mid-batch or at a batch's front, at every batch size: the sink
// gets exactly the lines before the hole, once each and in order, the position stops there, and the
// drain fails with ErrRowsMissing, the package named once.
func TestAHoleReachedByTheReaderAheadStopsTheDrainBeforeIt(t *testing.T) {
	for _, c := range []struct{ size, bytes int }{{1, 1 << 20}, {3, 1 << 20}, {256, 1}, {256, 70}, {4, 45}} {
		t.Run(fmt.Sprintf("size=%d,bytes=%d", c.size, c.bytes), func(t *testing.T) {
			s, _ := outboxtest.Setup(t)
			ctx := context.Background()
			for range 40 {
				outboxtest.MustEnqueue(t, s, "r")
			}
			if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`DELETE FROM events_outbox WHERE seq IN (23, 24)`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			sink := outboxtest.NewMemSink()
			r := outboxtest.FastRelay(t, s, sink, "r", outbox.WithBatchSize(c.size), outbox.WithBatchBytes(c.bytes))
			err := r.Flush(ctx)
			if !errors.Is(err, outbox.ErrRowsMissing) {
				t.Fatalf("Flush over a hole: %v, want ErrRowsMissing", err)
			}
			if n := strings.Count(err.Error(), "outbox:"); n != 1 {
				t.Errorf("%q names the package %d times", err, n)
			}
			if got := outboxtest.SeqsOf(sink.All()); fmt.Sprint(got) != fmt.Sprint(outboxtest.SeqRange(1, 22)) {
				t.Errorf("sink has %v, want 1..22", got)
			}
			if got, err := s.Projected(ctx, "r"); got != 22 || err != nil {
				t.Errorf("Projected = %d, %v; want 22", got, err)
			}
			// Again: nothing is sent twice.
			if err := r.Flush(ctx); !errors.Is(err, outbox.ErrRowsMissing) {
				t.Errorf("second Flush: %v", err)
			}
			if n := len(sink.All()); n != 22 {
				t.Errorf("sink has %d lines after the second Flush, want 22", n)
			}
		})
	}
}

// TestCloseDuringADrainWithTinyBatchesLeavesTheStoreConsistent: a store closed while a relay drains a
// backlog one line at a time with its reader ahead running: Flush returns (ErrClosed or done), the
// sink holds a prefix of the lines, once each, and a reopened store's relay sends exactly the rest.
func TestCloseDuringADrainWithTinyBatchesLeavesTheStoreConsistent(t *testing.T) {
	s, path := outboxtest.Setup(t)
	ctx := context.Background()
	for range 200 {
		outboxtest.MustEnqueue(t, s, "r")
	}
	sink := outboxtest.NewMemSink()
	r := outboxtest.FastRelay(t, s, sink, "r", outbox.WithBatchBytes(1))
	flushed := make(chan error, 1)
	go func() { flushed <- r.Flush(ctx) }()
	for range 5 {
		<-sink.Got()
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-flushed; err != nil && !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Flush during Close: %v", err)
	}
	first := outboxtest.SeqsOf(sink.All())
	t.Logf("the sink held %d of 200 lines at Close", len(first))
	if fmt.Sprint(first) != fmt.Sprint(outboxtest.SeqRange(1, int64(len(first)))) {
		t.Fatalf("sink holds %v, not a prefix", first)
	}
	s2, err := outbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := s2.Projected(ctx, "r"); got != int64(len(first)) || err != nil {
		t.Fatalf("Projected after reopen = %d, %v; the sink holds %d", got, err, len(first))
	}
	if err := outboxtest.NewRelay(t, s2, sink, "r").Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := outboxtest.SeqsOf(sink.All()); fmt.Sprint(got) != fmt.Sprint(outboxtest.SeqRange(1, 200)) {
		t.Fatalf("sink holds %v after the reopened relay, want 1..200 once each", got)
	}
}

// TestABuilderThatCallsGoexitInAGroupFailsItsGroupAndTheStoreGoesOn: with group commit the builder
// runs on the committer's goroutine, where runtime.Goexit (t.FailNow called from a builder) ends that
// goroutine past any recover. The calls of its group must fail, not wait for ever, nothing of the
// group may be stored, and later calls must be served.
func TestABuilderThatCallsGoexitInAGroupFailsItsGroupAndTheStoreGoesOn(t *testing.T) {
	s, _ := outboxtest.Setup(t)
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		errc := make(chan error, 1)
		go func() {
			_, err := s.EnqueueEvent(ctx, "r", func(int64) ([]byte, error) {
				runtime.Goexit()
				return nil, nil
			})
			errc <- err
		}()
		select {
		case err := <-errc:
			if err == nil {
				t.Fatal("a builder that called runtime.Goexit: EnqueueEvent returned nil")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a builder that called runtime.Goexit: EnqueueEvent never returned")
		}
		seq, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("after"))
		if err != nil || seq != int64(round+1) {
			t.Fatalf("the enqueue after: seq %d, %v; want %d, nil", seq, err, round+1)
		}
	}
	checkDense(t, s, 3)
	if err := s.Close(); err != nil {
		t.Fatalf("Close after the committer was replaced: %v", err)
	}
}

// TestAnInsertThatFailsAfterWritingLeavesNoRow: a trigger's RAISE(FAIL) fails the insert but keeps the
// row it wrote. The call is told it failed, so the row must not stay, in a group whose other calls
// commit or in a transaction of its own, with a small line or a large one stored apart.
func TestAnInsertThatFailsAfterWritingLeavesNoRow(t *testing.T) {
	for _, group := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			s, path := outboxtest.Setup(t, outbox.WithGroupCommit(group))
			ctx := context.Background()
			if err := s.WriteTx(ctx, func(tx *sql.Tx) error {
				_, err := tx.Exec(`CREATE TRIGGER fail_bad AFTER INSERT ON events_outbox
					WHEN NEW.engine_run_id = 'bad' BEGIN SELECT RAISE(FAIL, 'refused after'); END`)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			large := outboxtest.ConstLine([]byte(`{"large":"` + strings.Repeat("x", 2000) + `"}`))
			var wg sync.WaitGroup
			var failed, stored atomic.Int64
			for w := 0; w < 8; w++ {
				run := "r"
				if w < 2 {
					run = "bad"
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 10; i++ {
						build := outboxtest.LineOf("x")
						if i%2 == 1 {
							build = large
						}
						_, err := s.EnqueueEvent(ctx, run, build)
						switch {
						case run == "bad" && err == nil:
							t.Errorf("an insert the trigger failed was acknowledged")
						case run == "bad":
							failed.Add(1)
						case err != nil:
							t.Errorf("run r: %v", err)
						default:
							stored.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if n := len(outboxtest.AllLines(t, s, "bad")); n != 0 {
				t.Errorf("%d calls told they failed, %d rows of theirs stored", failed.Load(), n)
			}
			if n := int64(len(outboxtest.AllLines(t, s, "r"))); n != stored.Load() {
				t.Errorf("run r: %d rows stored, %d acknowledged", n, stored.Load())
			}
			var orphans int
			if err := outboxtest.RawDB(t, path).QueryRow(
				`SELECT count(*) FROM events_lines WHERE id NOT IN (SELECT spill FROM events_outbox)`).Scan(&orphans); err != nil {
				t.Fatal(err)
			}
			if orphans != 0 {
				t.Errorf("%d large lines left without their row", orphans)
			}
		})
	}
}
