// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"
	"github.com/ncruces/go-sqlite3/driver"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// BenchmarkFollowStreamBacklog applies a backlog of 20,000 lines (2,000 with -short) of about 200 bytes (four runs,
// interleaved) from one server's file stream, in each iteration and back to back, through:
//
//   - follow: FollowStream into a fresh inbox, its handler inserting one row per line, at the
//     default durability (FULL) and batch bounds, until its position reaches the stream's last
//     sequence;
//   - loop: a bare ordered consumer (nats.go's, pulling 1,024 messages at a time) whose loop
//     applies each batch of up to 1,024 lines in one transaction of a fresh SQLite database in WAL
//     mode with synchronous=FULL: per line the key parsed, the high-water mark checked, the same
//     handler called (one row inserted) and the run's mark and digest stored, and per batch the
//     stream sequence stored.
//
// Each side goes first in every other iteration, so both see the same disk. It reports lines/s for
// each and the ratio follow/loop.
func BenchmarkFollowStreamBacklog(b *testing.B) {
	n := 20_000
	if testing.Short() {
		n = 2_000
	}
	ns := startServer(b)
	js := ns.connect(b)
	ctx := context.Background()
	if _, err := jetstream.CreateStream(ctx, js, "EVENTS"); err != nil {
		b.Fatal(err)
	}
	runs := []string{"run-a", "run-b", "run-c", "run-d"}
	pad := "a unit of work of about a hundred bytes, as an engine's spend event carries, and some more"
	for i := 0; i < n; i++ {
		run := runs[i%len(runs)]
		line := fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"unit","pad":%q}`, run, i/len(runs)+1, pad)
		if _, err := js.PublishAsync("outbox."+jetstream.Token(run), line); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		b.Fatal("publishing the backlog took over a minute")
	}
	var inFollow, inLoop time.Duration
	i := 0
	for b.Loop() {
		follow := func() { inFollow += followBacklog(b, js, uint64(n)) }
		loop := func() { inLoop += loopBacklog(b, js, uint64(n)) }
		if i++; i%2 == 0 {
			follow()
			loop()
		} else {
			loop()
			follow()
		}
	}
	lines := float64(n) * float64(b.N)
	b.ReportMetric(lines/inFollow.Seconds(), "follow-lines/s")
	b.ReportMetric(lines/inLoop.Seconds(), "loop-lines/s")
	b.ReportMetric(inLoop.Seconds()/inFollow.Seconds(), "ratio")
}

// followBacklog runs FollowStream into a fresh inbox until it has committed stream sequence n.
func followBacklog(b *testing.B, js njs.JetStream, n uint64) time.Duration {
	in, err := inbox.Open(context.Background(), filepath.Join(b.TempDir(), "follow.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	if err := in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE applied (run TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY (run, seq))`)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	jetstream.SetAfterStreamCommit(func(_ string, seq uint64) {
		if seq == n {
			close(done)
		}
	})
	defer jetstream.SetAfterStreamCommit(nil)
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	start := time.Now()
	go func() { ended <- jetstream.FollowStream(ctx, js, "EVENTS", in, insertHandler) }()
	select {
	case <-done:
	case err := <-ended:
		b.Fatalf("FollowStream: %v", err)
	}
	took := time.Since(start)
	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
	return took
}

// loopBacklog applies the stream to sequence n with a bare ordered consumer and hand-written SQL.
func loopBacklog(b *testing.B, js njs.JetStream, n uint64) time.Duration {
	ctx := context.Background()
	d, err := driver.Open("file:" + filepath.Join(b.TempDir(), "loop.db") +
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)&_pragma=synchronous(full)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	d.SetMaxOpenConns(1)
	for _, q := range []string{
		`CREATE TABLE applied (run TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY (run, seq))`,
		`CREATE TABLE runs (run TEXT PRIMARY KEY, hwm INTEGER NOT NULL, digest BLOB NOT NULL) WITHOUT ROWID`,
		`CREATE TABLE sources (name TEXT PRIMARY KEY, position BLOB) WITHOUT ROWID`,
	} {
		if _, err := d.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	var stmts [3]*sql.Stmt
	for i, q := range []string{
		`SELECT hwm FROM runs WHERE run = ?`,
		`INSERT INTO runs (run, hwm, digest) VALUES (?, ?, ?) ON CONFLICT (run) DO UPDATE SET hwm = excluded.hwm, digest = excluded.digest`,
		`INSERT INTO sources (name, position) VALUES ('s', ?) ON CONFLICT (name) DO UPDATE SET position = excluded.position`,
	} {
		if stmts[i], err = d.Prepare(q); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	st, err := js.Stream(ctx, "EVENTS")
	if err != nil {
		b.Fatal(err)
	}
	cons, err := st.OrderedConsumer(ctx, njs.OrderedConsumerConfig{FilterSubjects: []string{"outbox.>"}})
	if err != nil {
		b.Fatal(err)
	}
	it, err := cons.Messages(njs.PullMaxMessages(1024))
	if err != nil {
		b.Fatal(err)
	}
	defer it.Stop()
	hwms := map[string]int64{}
	var batch []njs.Msg
	for last := uint64(0); last < n; {
		batch = batch[:0]
		for len(batch) < 1024 {
			m, err := it.Next()
			if err != nil {
				b.Fatal(err)
			}
			batch = append(batch, m)
			meta, _ := m.Metadata()
			last = meta.Sequence.Stream
			if meta.NumPending == 0 || last >= n {
				break
			}
		}
		tx, err := d.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		get, set, pos := tx.Stmt(stmts[0]), tx.Stmt(stmts[1]), tx.Stmt(stmts[2])
		for _, m := range batch {
			l := m.Data()
			run, seq, err := journal.LineKey(l)
			if err != nil {
				b.Fatal(err)
			}
			hwm, ok := hwms[run]
			if !ok {
				if err := get.QueryRowContext(ctx, run).Scan(&hwm); err != nil && err != sql.ErrNoRows {
					b.Fatal(err)
				}
			}
			if seq != hwm+1 {
				continue
			}
			if err := insertHandler(ctx, tx, inbox.Event{RunID: run, Seq: seq, Line: append([]byte(nil), l...)}); err != nil {
				b.Fatal(err)
			}
			sum := sha256.Sum256(l)
			if _, err := set.ExecContext(ctx, run, seq, sum[:]); err != nil {
				b.Fatal(err)
			}
			hwms[run] = seq
		}
		if _, err := pos.ExecContext(ctx, strconv.FormatUint(last, 10)); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkStreamLatency measures, for one event at a time, the time from EnqueueEvent returning to
// the platform handler's commit of it: an engine's store with its relay projecting through the sink,
// and FollowStream applying into an inbox, both against one in-process server (one-replica file
// stream, default durabilities). It reports p50, p99 and the worst.
func BenchmarkStreamLatency(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := startServer(b)
	js := ns.connect(b)
	if _, err := jetstream.CreateStream(ctx, js, "EVENTS"); err != nil {
		b.Fatal(err)
	}
	store, err := outbox.Open(ctx, filepath.Join(b.TempDir(), "book.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	var projected sync.Map // seq -> time.Time
	relay := outboxtest.NewRelay(b, store, sink(b, js), "a", outbox.WithOnProjected(func(_ string, _ int, last int64) {
		projected.Store(last, time.Now())
	}))
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(ctx) }()

	in, err := inbox.Open(ctx, filepath.Join(b.TempDir(), "platform.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	if err := in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE applied (run TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY (run, seq))`)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	type commit struct {
		seq uint64
		at  time.Time
	}
	committed := make(chan commit, 1024)
	jetstream.SetAfterStreamCommit(func(_ string, seq uint64) { committed <- commit{seq, time.Now()} })
	defer jetstream.SetAfterStreamCommit(nil)
	followDone := make(chan error, 1)
	go func() { followDone <- jetstream.FollowStream(ctx, js, "EVENTS", in, insertHandler) }()

	var lat, relayLat []time.Duration
	for b.Loop() {
		seq, err := store.EnqueueEvent(ctx, "a", journal.Builder("a", "unit", nil))
		if err != nil {
			b.Fatal(err)
		}
		at := time.Now()
		for c := range committed {
			// One run through the sink: its line seq is its stream sequence.
			if c.seq >= uint64(seq) {
				lat = append(lat, max(c.at.Sub(at), 0))
				if p, ok := projected.Load(seq); ok {
					relayLat = append(relayLat, p.(time.Time).Sub(at))
				}
				break
			}
		}
	}
	b.StopTimer()
	cancel()
	if err := <-followDone; !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
	<-relayDone
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "max-µs")
	slices.Sort(relayLat)
	if len(relayLat) > 0 {
		b.ReportMetric(float64(relayLat[len(relayLat)/2].Microseconds()), "relay-p50-µs")
	}
}
