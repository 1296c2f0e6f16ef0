// SPDX-License-Identifier: Apache-2.0

package journal_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

type OrderPlaced struct {
	Order string `json:"order"`
	Cents int64  `json:"cents"`
}

// An event enqueued with the caller's writes, its run id named once, in the enqueue: the store gives
// it to the builder with the seq.
func ExampleEvent() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "outbox-example")
	defer os.RemoveAll(dir)
	s, err := outbox.Open(ctx, filepath.Join(dir, "book.db"), outbox.WithLineCheck(journal.CheckLine))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	const run = "run-1"
	err = s.WriteTx(ctx, func(tx *sql.Tx) error {
		_, err := s.EnqueueTx(ctx, tx, run, journal.Event("order_placed", OrderPlaced{Order: "o-1", Cents: 250}))
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	lines, err := s.PendingEvents(ctx, run, 0, 10)
	if err != nil {
		log.Fatal(err)
	}
	var l struct {
		Run  string          `json:"engine_run_id"`
		Seq  int64           `json:"seq"`
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(lines[0].Line, &l); err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Run, l.Seq, l.Type, string(l.Data))
	// Output: run-1 1 order_placed {"order":"o-1","cents":250}
}
