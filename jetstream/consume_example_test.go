// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/nats-io/nats.go"
	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
)

// A platform consumer that applies the stream EVENTS exactly once into its own database, the spend
// table written in the same transaction as the inbox's record of each line and the stream position.
func ExampleFollowStream() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := njs.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.Open(ctx, "platform.db")
	if err != nil {
		log.Fatal(err)
	}
	defer in.Close()
	err = jetstream.FollowStream(ctx, js, "EVENTS", in, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO spend (run, seq, line) VALUES (?, ?, ?)`, ev.RunID, ev.Seq, ev.Line)
		return err
	})
	var gap *jetstream.RetentionGapError
	if errors.As(err, &gap) {
		// The stream no longer holds what follows the position: an operator decides, and runs
		// ApplyStream once with jetstream.WithAcceptRetentionGap() to read on past it.
		log.Fatalf("stream %s: messages %d to %d are gone; runs lost whole: %q", gap.Stream, gap.Position+1, gap.FirstSeq-1, gap.RunsGone)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}
