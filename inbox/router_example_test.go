// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/textmachine/outbox/inbox"
)

type OrderPlaced struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

type OrderCancelled struct {
	ID string `json:"id"`
}

// A consumer of two event types, each handler given its event's data decoded: no envelope to decode
// and no switch on the type to write.
func ExampleRouter() {
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	in, err := inbox.Open(ctx, filepath.Join(dir, "platform.db"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer in.Close()
	in.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER, cancelled INTEGER DEFAULT 0)`)
		return err
	})

	r := inbox.NewRouter(inbox.WithUnknownType(inbox.UnknownIgnore))
	r.Handle("order_placed", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v OrderPlaced) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, cents) VALUES (?, ?)`, v.ID, v.Cents)
		return err
	}))
	r.Handle("order_cancelled", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v OrderCancelled) error {
		_, err := tx.ExecContext(ctx, `UPDATE orders SET cancelled = 1 WHERE id = ?`, v.ID)
		return err
	}))

	lines := [][]byte{
		[]byte(`{"engine_run_id":"r1","seq":1,"type":"run_started","at":"2026-12-03T11:00:00.000000000Z","data":null}`),
		[]byte(`{"engine_run_id":"r1","seq":2,"type":"order_placed","at":"2026-12-03T11:00:01.000000000Z","data":{"id":"o-1","cents":250}}`),
		[]byte(`{"engine_run_id":"r2","seq":1,"type":"order_placed","at":"2026-12-03T11:00:01.000000000Z","data":{"id":"o-2","cents":"a lot"}}`),
		[]byte(`{"engine_run_id":"r1","seq":3,"type":"order_cancelled","at":"2026-12-03T11:00:02.000000000Z","data":{"id":"o-1"}}`),
	}
	rep, err := in.Apply(ctx, lines, r.Route)
	fmt.Printf("%+v %v\n", rep, err)

	var id string
	var cents, cancelled int64
	in.WriteTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRow(`SELECT id, cents, cancelled FROM orders`).Scan(&id, &cents, &cancelled)
	})
	fmt.Println(id, cents, cancelled)
	// Data that does not decode parks its run alone.
	qs, _ := in.Quarantined(ctx)
	fmt.Println(qs[0].RunID, qs[0].Reason)
	// Output:
	// {Applied:3 Duplicates:0 Stale:0 Quarantined:1} <nil>
	// o-1 250 1
	// r2 handler
}

// A handler whose errors are transient: each failure is tried again after a growing pause, and a
// line that still fails parks its run alone while the other runs go on.
func ExampleWithRetry() {
	dir, _ := os.MkdirTemp("", "inbox-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	backoff := func(attempt int) time.Duration { return time.Duration(attempt) * time.Millisecond }
	in, err := inbox.Open(ctx, filepath.Join(dir, "platform.db"), inbox.WithRetry(3, backoff))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer in.Close()

	calls := 0
	h := func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if ev.RunID == "r2" {
			calls++
			return fmt.Errorf("the rates service answered 503")
		}
		return nil
	}
	rep, err := in.Apply(ctx, [][]byte{
		[]byte(`{"engine_run_id":"r1","seq":1,"type":"t","data":null}`),
		[]byte(`{"engine_run_id":"r2","seq":1,"type":"t","data":null}`),
		[]byte(`{"engine_run_id":"r1","seq":2,"type":"t","data":null}`),
	}, h)
	fmt.Printf("%+v %v %d\n", rep, err, calls)
	qs, _ := in.Quarantined(ctx)
	fmt.Println(qs[0].RunID, qs[0].Detail)
	// Output:
	// {Applied:2 Duplicates:0 Stale:0 Quarantined:1} <nil> 4
	// r2 the handler failed 4 times; the last error: the rates service answered 503
}
