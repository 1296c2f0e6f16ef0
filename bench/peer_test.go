// SPDX-License-Identifier: Apache-2.0

// Package bench compares the outbox with its peers (goqite, River) on the same machine, driver,
// durability and payload. It is a module of its own so that the library never depends on a peer.
package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/driver"
	"maragu.dev/goqite"

	"github.com/textmachine/outbox/outbox"
)

// The same 200-byte line the outbox's own benchmarks use.
var payload = []byte(`{"engine_run_id":"run-0123456789abcdef","seq":1,"type":"spend","at":"2026-11-30T01:59:17.123456789Z","data":{"unit":"u-000123","amount":1234}}` + strings.Repeat(" ", 60))

// goqiteDB opens a database with goqite's own schema, read from the module that the go command
// resolved, so that the schema is exactly the peer's. Same driver, WAL, synchronous=FULL, BEGIN
// IMMEDIATE and one writer connection, as the outbox uses.
func goqiteDB(b *testing.B) *sql.DB {
	b.Helper()
	dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "maragu.dev/goqite").Output()
	if err != nil {
		b.Fatalf("locate goqite: %v", err)
	}
	schema, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(dir)), "schema_sqlite.sql"))
	if err != nil {
		b.Fatal(err)
	}
	d := peerDB(b, "q.db")
	if _, err := d.Exec(string(schema)); err != nil {
		b.Fatal(err)
	}
	return d
}

// peerDB opens a new database for a peer as the outbox opens its own: the same driver, WAL,
// synchronous=FULL set on the connection (the level is per connection), BEGIN IMMEDIATE, a busy
// timeout, and one writer connection.
func peerDB(b testing.TB, name string) *sql.DB {
	b.Helper()
	d, err := driver.Open("file:"+filepath.Join(b.TempDir(), name)+"?_txlock=immediate", func(c *sqlite3.Conn) error {
		return c.Exec("PRAGMA busy_timeout=5000; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL")
	})
	if err != nil {
		b.Fatal(err)
	}
	d.SetMaxOpenConns(1)
	b.Cleanup(func() { d.Close() })
	return d
}

// parallel runs b.N calls of fn spread over p goroutines and reports events/s.
func parallel(b *testing.B, p int, fn func() error) {
	b.ResetTimer()
	spread(b, p, b.N, fn)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// spread runs n calls of fn over p goroutines and returns how long they took.
func spread(b *testing.B, p, n int, fn func() error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	t0 := time.Now()
	for range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := fn(); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(t0)
}

// BenchmarkPeerSend: one durable message per call, from 1 and 16 goroutines: goqite's Send beside the
// outbox's EnqueueEvent.
func BenchmarkPeerSend(b *testing.B) {
	ctx := context.Background()
	for _, p := range []int{1, 16} {
		b.Run(fmt.Sprintf("goqite/producers=%d", p), func(b *testing.B) {
			q := goqite.New(goqite.NewOpts{DB: goqiteDB(b), Name: "events"})
			parallel(b, p, func() error { return q.Send(ctx, goqite.Message{Body: payload}) })
		})
		b.Run(fmt.Sprintf("outbox/producers=%d", p), func(b *testing.B) {
			s, err := outbox.Open(ctx, filepath.Join(b.TempDir(), "o.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			build := func(int64) ([]byte, error) { return payload, nil }
			parallel(b, p, func() error { _, err := s.EnqueueEvent(ctx, "run", build); return err })
		})
	}
}
