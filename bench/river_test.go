// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/textmachine/outbox/outbox"
)

// riverEvent is the job River stores for one event: a kind no worker runs (the client only inserts),
// whose encoded arguments are exactly as long as the outbox's event line.
type riverEvent struct {
	Line string `json:"line"`
}

func (riverEvent) Kind() string { return "event" }

// riverLine is the event line with its quotes swapped, so that JSON encoding adds nothing but the
// wrapper, cut to leave room for that wrapper (`{"line":""}`).
var riverLine = strings.ReplaceAll(string(payload), `"`, `'`)[:len(payload)-len(`{"line":""}`)]

// unitDone is the caller's own write that each event accompanies: one row of a table of its own.
const (
	unitsTable = `CREATE TABLE units (id INTEGER PRIMARY KEY, state TEXT NOT NULL)`
	unitDone   = `INSERT INTO units (state) VALUES ('done')`
)

// riverPeer is an insert-only River client (no queues, no workers, never started: River's
// documented form for a process that only inserts) on a database that River's own migrator
// (rivermigrate) has brought to its current schema. peerDB gives it the one connection that
// riversqlite's documentation asks for, since River otherwise fails with SQLITE_BUSY.
type riverPeer struct {
	db     *sql.DB
	client *river.Client[*sql.Tx]
}

func newRiverPeer(b testing.TB) *riverPeer {
	b.Helper()
	ctx := context.Background()
	d := peerDB(b, "river.db")
	quiet := slog.New(slog.DiscardHandler)
	m, err := rivermigrate.New(riversqlite.New(d), &rivermigrate.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatalf("river migrations: %v", err)
	}
	if _, err := d.ExecContext(ctx, unitsTable); err != nil {
		b.Fatal(err)
	}
	client, err := river.NewClient(riversqlite.New(d), &river.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	return &riverPeer{db: d, client: client}
}

// inTx runs fn in a transaction of the peer's database and commits it.
func (r *riverPeer) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// insertTx is one producer's call: the caller's row and one job, in one transaction.
func (r *riverPeer) insertTx(ctx context.Context) error {
	return r.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, unitDone); err != nil {
			return err
		}
		_, err := r.client.InsertTx(ctx, tx, riverEvent{Line: riverLine}, nil)
		return err
	})
}

// insertManyTx inserts a batch of jobs in one transaction.
func (r *riverPeer) insertManyTx(ctx context.Context, batch []river.InsertManyParams) error {
	return r.inTx(ctx, func(tx *sql.Tx) error {
		_, err := r.client.InsertManyTx(ctx, tx, batch)
		return err
	})
}

// outboxPeer is the outbox's side of the same calls, with the caller's table in the store's database.
type outboxPeer struct{ s *outbox.Store }

func newOutboxPeer(b testing.TB) *outboxPeer {
	b.Helper()
	ctx := context.Background()
	s, err := outbox.Open(ctx, filepath.Join(b.TempDir(), "o.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.WriteTx(ctx, func(tx *sql.Tx) error { _, err := tx.ExecContext(ctx, unitsTable); return err }); err != nil {
		b.Fatal(err)
	}
	return &outboxPeer{s: s}
}

func line(int64) ([]byte, error) { return payload, nil }

// enqueueTx is one producer's call: the caller's row and one event, in one transaction.
func (o *outboxPeer) enqueueTx(ctx context.Context) error {
	return o.s.WriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, unitDone); err != nil {
			return err
		}
		_, err := o.s.EnqueueTx(ctx, tx, "run", line)
		return err
	})
}

// alternate runs, in every iteration, n calls of each side over p goroutines, the two sides taking
// turns at going first, and reports each side's events/s and the outbox's rate over River's. Taking
// turns within one iteration puts the disk's drift and the neighbours' load on both sides alike;
// separate benchmarks minutes apart move their ratio by more than the effect.
func alternate(b *testing.B, p, n, perCall int, riverCall, outboxCall func() error) {
	var inRiver, inOutbox time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			inRiver += spread(b, p, n, riverCall)
			inOutbox += spread(b, p, n, outboxCall)
		} else {
			inOutbox += spread(b, p, n, outboxCall)
			inRiver += spread(b, p, n, riverCall)
		}
	}
	events := float64(n * perCall * b.N)
	b.ReportMetric(events/inRiver.Seconds(), "river-events/s")
	b.ReportMetric(events/inOutbox.Seconds(), "outbox-events/s")
	b.ReportMetric(inRiver.Seconds()/inOutbox.Seconds(), "ratio")
}

// BenchmarkPeerRiver: River's InsertTx beside the outbox's EnqueueTx, one event and one row of the
// caller's own table per transaction, from 1 and 16 producers; and River's InsertManyTx beside
// EnqueueEvents, 100 events per transaction. Both sides durable on return at FULL.
func BenchmarkPeerRiver(b *testing.B) {
	ctx := context.Background()
	calls, batches := 1000, 40
	if testing.Short() {
		calls, batches = 20, 2
	}
	for _, p := range []int{1, 16} {
		b.Run(fmt.Sprintf("InsertTx/producers=%d", p), func(b *testing.B) {
			r, o := newRiverPeer(b), newOutboxPeer(b)
			alternate(b, p, calls, 1, func() error { return r.insertTx(ctx) }, func() error { return o.enqueueTx(ctx) })
		})
	}
	b.Run("InsertManyTx/batch=100", func(b *testing.B) {
		r, o := newRiverPeer(b), newOutboxPeer(b)
		jobs := make([]river.InsertManyParams, 100)
		builds := make([]outbox.EventBuilder, 100)
		for i := range jobs {
			jobs[i] = river.InsertManyParams{Args: riverEvent{Line: riverLine}}
			builds[i] = line
		}
		alternate(b, 1, batches, len(jobs),
			func() error { return r.insertManyTx(ctx, jobs) },
			func() error { _, err := o.s.EnqueueEvents(ctx, "run", builds); return err })
	})
}
