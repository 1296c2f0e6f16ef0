// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/migrations"
	"github.com/textmachine/outbox/outbox"
)

// The ledger's size is measured with keys and run ids of the lengths an engine gives them: a run id
// of 28 bytes (the demo's "demo-SEED-START-UNIXNANO"), a key of 19 ("unit_done:u-" and seven digits),
// 100 keys a run, and lines of about 300 bytes.
const ledgerKeysPerRun = 100

func ledgerRunID(i int) string {
	return fmt.Sprintf("demo-1-%d-1764766000000000000", i/ledgerKeysPerRun)
}

func ledgerKey(k int) string { return fmt.Sprintf("unit_done:u-%07d", k) }

func ledgerLine(run string, seq int64, key string) []byte {
	return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"unit_done","at":"2026-12-03T12:00:00.000000000Z","data":{"key":%q,"cents":1234,"note":%q}}`,
		run, seq, key, strings.Repeat("n", 120))
}

// bookBytes is the book's file size once checkpointed, and its free pages.
func bookBytes(t testing.TB, path string) (size, free int64) {
	t.Helper()
	d := outboxtest.RawDBRW(t, path)
	defer d.Close()
	if _, err := d.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	var pages, pageSize int64
	for q, v := range map[string]*int64{"PRAGMA page_count": &pages, "PRAGMA page_size": &pageSize, "PRAGMA freelist_count": &free} {
		if err := d.QueryRow(q).Scan(v); err != nil {
			t.Fatal(err)
		}
	}
	return pages * pageSize, free
}

// newLedger builds, through the store and the relay, a new book whose ledger holds keys keys, in the
// order order gives them, and returns its path. The keys are projected as an engine projects them,
// a WriteTx of a thousand announcements at a time.
func newLedger(t testing.TB, keys int, order []int) string {
	t.Helper()
	ctx := context.Background()
	s, path := outboxtest.Setup(t)
	relays := map[string]*outbox.Relay{}
	for start := 0; start < keys; start += 1000 {
		err := s.WriteTx(ctx, func(tx *sql.Tx) error {
			for i := start; i < min(start+1000, keys); i++ {
				run, key := ledgerRunID(i), ledgerKey(order[i])
				if _, _, err := s.EnqueueOnceTx(ctx, tx, run, key, func(seq int64) ([]byte, error) { return ledgerLine(run, seq, key), nil }); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := start; i < min(start+1000, keys); i += ledgerKeysPerRun {
			run := ledgerRunID(i)
			if relays[run] == nil {
				r, err := outbox.NewRelay(s, discard{}, run)
				if err != nil {
					t.Fatal(err)
				}
				relays[run] = r
			}
			if err := relays[run].Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	return path
}

// discard is a sink that holds nothing: the measure is the book's.
type discard struct{}

func (discard) Append(context.Context, string, []outbox.EventLine) error { return nil }

// oldLedger builds a book as the release before the ledger kept digests left it: keys ledger rows,
// each holding its whole line and its key twice (ledger and pending key), every run projected, in a
// book without incremental auto-vacuum.
func oldLedger(t testing.TB, keys int, order []int) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "book.db")
	d := outboxtest.RawDBRW(t, path)
	p, err := migrations.NewProvider(d)
	if err != nil {
		t.Fatal(err)
	}
	before := int64(0)
	for _, v := range migrations.Known() {
		if v < 6 {
			before = v
		}
	}
	if _, err := p.UpTo(ctx, before); err != nil {
		t.Fatal(err)
	}
	for start := 0; start < keys; start += 10000 {
		tx, err := d.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for i := start; i < min(start+10000, keys); i++ {
			run, seq, key := ledgerRunID(i), int64(i%ledgerKeysPerRun+1), ledgerKey(order[i])
			if _, err := tx.Exec(`INSERT INTO events_outbox (engine_run_id, seq, line, once_key, announce_key, enqueued_at)
				VALUES (?, ?, ?, ?, ?, 1764766000000)`, run, seq, ledgerLine(run, seq, key), key, key); err != nil {
				t.Fatal(err)
			}
			if seq == ledgerKeysPerRun || i == keys-1 {
				if _, err := tx.Exec(`INSERT INTO outbox_progress (engine_run_id, projected, last_seq) VALUES (?, ?, ?)`, run, seq, seq); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	return path
}

// keyOrders are the orders an engine announces its keys in: as its units are numbered, or in no
// order (units named by a random id).
var keyOrders = []struct {
	name  string
	order func(n int) []int
}{
	{"ascending", func(n int) []int {
		o := make([]int, n)
		for i := range o {
			o[i] = i
		}
		return o
	}},
	{"random", func(n int) []int { return rand.New(rand.NewPCG(1, 2)).Perm(n) }},
}

// TestTheLedgerKeepsAtMost150BytesOfBookPerKey measures the book of a ledger built through the store
// and the relay, its keys announced in either order: each key, once projected, costs its key, its
// run and seq and its line's digest, at most 150 bytes of book, beside at most 256 free pages.
func TestTheLedgerKeepsAtMost150BytesOfBookPerKey(t *testing.T) {
	t.Parallel()
	const keys = 20000
	for _, o := range keyOrders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			path := newLedger(t, keys, o.order(keys))
			size, free := bookBytes(t, path)
			// The free pages the store keeps for the inserts to come are a bound of their own, not
			// a cost a key: at 10^6 keys they are a byte a key.
			perKey := float64(size-free*4096) / keys
			t.Logf("%d keys, %s: %d bytes of book (%d free pages), %.1f bytes a key", keys, o.name, size, free, perKey)
			if perKey > 150 {
				t.Errorf("%.1f bytes of book a key, want at most 150", perKey)
			}
			if free > 256 {
				t.Errorf("%d free pages kept, want at most 256", free)
			}
		})
	}
}

// BenchmarkLedgerBytesPerKey reports the bytes of book a ledger key costs, at 10^5 and 10^6 keys:
// before (B/key-before: the layout of the release before, each row holding its whole line),
// converted by Recover (B/key-converted: the file keeps its size, its pages free), after Vacuum
// (B/key-vacuumed, and vacuum-s its time), and built by this release through the relay (B/key-new).
// Each size is measured once: run it with -benchtime=1x. With -short it builds 10^4 keys only.
func BenchmarkLedgerBytesPerKey(b *testing.B) {
	sizes := []int{100_000, 1_000_000}
	if testing.Short() {
		sizes = []int{10_000} // make test's run keeps it from rotting; it measures nothing
	}
	for _, keys := range sizes {
		for _, o := range keyOrders {
			b.Run(fmt.Sprintf("keys=%d/%s", keys, o.name), func(b *testing.B) {
				ctx := context.Background()
				order := o.order(keys)
				for b.Loop() {
					path := oldLedger(b, keys, order)
					before, _ := bookBytes(b, path)
					s, err := outbox.Open(ctx, path)
					if err != nil {
						b.Fatal(err)
					}
					r, err := outbox.NewRelay(s, discard{}, "bench")
					if err != nil {
						b.Fatal(err)
					}
					if err := r.Recover(ctx); err != nil {
						b.Fatal(err)
					}
					s.Close()
					converted, _ := bookBytes(b, path)
					if s, err = outbox.Open(ctx, path); err != nil {
						b.Fatal(err)
					}
					took, err := s.Vacuum(ctx)
					if err != nil {
						b.Fatal(err)
					}
					s.Close()
					vacuumed, _ := bookBytes(b, path)
					built, _ := bookBytes(b, newLedger(b, keys, order))
					b.ReportMetric(float64(before)/float64(keys), "B/key-before")
					b.ReportMetric(float64(converted)/float64(keys), "B/key-converted")
					b.ReportMetric(float64(vacuumed)/float64(keys), "B/key-vacuumed")
					b.ReportMetric(took.Seconds(), "vacuum-s")
					b.ReportMetric(float64(built)/float64(keys), "B/key-new")
				}
			})
		}
	}
}
