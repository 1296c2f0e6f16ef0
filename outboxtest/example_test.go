// SPDX-License-Identifier: Apache-2.0

package outboxtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
	"github.com/textmachine/outbox/outboxtest"
)

// exampleT stands in for the *testing.T of a test, which an Example is not given: in a test, pass
// the test's own t.
type exampleT struct {
	testing.TB // nil: the helpers call only the methods below
	dirs       []string
	cleanups   []func()
}

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()          {}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) TempDir() string {
	d, err := os.MkdirTemp("", "outboxtest-example")
	if err != nil {
		panic(err)
	}
	t.dirs = append(t.dirs, d)
	return d
}
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// done is what the test's end does: the cleanups, last first, then the temporary directories.
func (t *exampleT) done() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
	for _, d := range t.dirs {
		os.RemoveAll(d)
	}
}

type OrderPlaced struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

// placeOrder is the engine's code under test: it records an order and its event in one transaction.
func placeOrder(ctx context.Context, s *outbox.Store, run string, o OrderPlaced) error {
	return s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, cents INTEGER)`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, ?)`, o.ID, o.Cents); err != nil {
			return err
		}
		_, err := s.EnqueueTx(ctx, tx, run, journal.Event("order_placed", o))
		return err
	})
}

// A test of the engine's code: the store is a fresh book, and its line check refuses at the enqueue a
// builder's line that is not a journal line of its own run and seq.
func ExampleNewStore() {
	t := newExampleT() // in a test: the test's t
	defer t.done()
	ctx := context.Background()

	s := outboxtest.NewStore(t)
	if err := placeOrder(ctx, s, "run-1", OrderPlaced{ID: "o-1", Cents: 250}); err != nil {
		fmt.Println(err)
	}
	lines, _ := s.PendingEvents(ctx, "run-1", 0, 10)
	fmt.Println(len(lines), lines[0].Seq)

	// A builder that names another run is caught at once.
	_, err := s.EnqueueEvent(ctx, "run-1", journal.Builder("run-2", "order_placed", nil))
	fmt.Println(err != nil)
	// Output:
	// 1 1
	// true
}

// The lines an engine's relay would append to the journal, kept in memory and checked as the
// journal file checks them.
func ExampleSink() {
	t := newExampleT() // in a test: the test's t
	defer t.done()
	ctx := context.Background()

	s := outboxtest.NewStore(t)
	s.EnqueueEvent(ctx, "run-1", journal.Handshake("run-1", nil))
	placeOrder(ctx, s, "run-1", OrderPlaced{ID: "o-1", Cents: 250})

	sink := outboxtest.NewSink()
	outboxtest.Flush(t, s, sink, "run-1")
	fmt.Println(sink.Runs(), len(sink.RunLines("run-1")))

	// A line that is not the run's own is refused, as the journal file refuses it.
	err := sink.Append(ctx, "run-1", []outbox.EventLine{{Seq: 3, Line: []byte(`{"engine_run_id":"run-2","seq":3}`)}})
	fmt.Println(err != nil)
	// Output:
	// [run-1] 2
	// true
}

// A test of the platform's handlers: lines from a slice, applied to a fresh inbox as a source would.
func ExampleFeed() {
	t := newExampleT() // in a test: the test's t
	defer t.done()

	in := outboxtest.NewInbox(t)
	total := int64(0)
	r := inbox.NewRouter()
	r.Handle("order_placed", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v OrderPlaced) error {
		total += v.Cents
		return nil
	}))

	rep := outboxtest.Feed(t, in, r.Route,
		[]byte(`{"engine_run_id":"run-1","seq":1,"type":"order_placed","data":{"id":"o-1","cents":250}}`),
		[]byte(`{"engine_run_id":"run-1","seq":2,"type":"order_placed","data":{"id":"o-2","cents":100}}`),
		[]byte(`{"engine_run_id":"run-1","seq":1,"type":"order_placed","data":{"id":"o-1","cents":250}}`),
	)
	fmt.Printf("%+v %d\n", rep, total)
	// Output: {Applied:2 Duplicates:1 Stale:0 Quarantined:0} 350
}
