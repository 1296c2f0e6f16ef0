// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
)

func jline(run string, seq int64) []byte {
	return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"t","data":{}}`, run, seq)
}

func nothing(context.Context, *sql.Tx, inbox.Event) error { return nil }

// The inbox's counters are the counts its database keeps: what the calls applied, found duplicate
// and left quarantined, the same after the consumer starts again, read by a collector of the
// consumer's own Inbox or of one opened read-only beside it.
func TestTheInboxsCountersAreTheCountsItsDatabaseKeeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "consumer.db")
	in, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close() }()
	apply := func(lines ...[]byte) {
		t.Helper()
		if _, err := in.Apply(ctx, lines, nothing); err != nil {
			t.Fatal(err)
		}
	}
	apply(jline("a", 1), jline("a", 2), jline("a", 3))
	apply(jline("a", 2), jline("a", 3), jline("a", 4), jline("q", 5))
	want := map[string]float64{
		"outbox_inbox_up": 1, "outbox_inbox_runs": 1,
		"outbox_inbox_lines_applied_total": 4, "outbox_inbox_lines_duplicates_total": 2,
		"outbox_inbox_lines_stale_total": 0, "outbox_inbox_lines_quarantined_total": 1,
		"outbox_inbox_quarantined_runs": 1, "outbox_inbox_run_quarantined{reason=gap,run=q}": 1,
		"outbox_inbox_quarantined_run_position{run=q}": 0,
	}
	check := func(what string, got map[string]float64) {
		t.Helper()
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: %s = %v (present %v), want %v", what, k, g, ok, v)
			}
		}
	}
	check("the consumer's inbox", scrape(t, NewInboxCollector(in)))
	in.Close()
	if in, err = inbox.Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	check("after a restart", scrape(t, NewInboxCollector(in)))
	ro, err := inbox.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	check("read-only beside it", scrape(t, NewInboxCollector(ro)))
}

// A file source's bytes still to read are a series of its own; a stream source's position is given
// only through WithStreamPositions, so that the module needs no NATS client.
func TestAFileSourcesBytesBehindAndAStreamSourcesPosition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	jpath := filepath.Join(dir, "journal.jsonl")
	if err := os.WriteFile(jpath, append(jline("a", 1), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.Open(ctx, filepath.Join(dir, "consumer.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := in.ApplyFile(ctx, jpath, nothing); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ApplyFrom(ctx, "jetstream:S outbox.>", nil, []byte("42 x"), nil, nothing); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(jpath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	more := append(jline("a", 2), '\n')
	f.Write(more)
	f.Close()
	got := scrape(t, NewInboxCollector(in, WithStreamPositions(func(s inbox.Source) (uint64, bool) {
		return 42, s.Name == "jetstream:S outbox.>"
	})))
	if v := got["outbox_inbox_source_behind_bytes{source="+inboxseam.FileSourcePrefix+jpath+"}"]; v != float64(len(more)) {
		t.Errorf("behind bytes %v, want %d (%v)", v, len(more), got)
	}
	if v := got["outbox_inbox_stream_position{source=jetstream:S outbox.>}"]; v != 42 {
		t.Errorf("stream position %v (%v)", v, got)
	}
	if got := scrape(t, NewInboxCollector(in)); len(got) == 0 || got["outbox_inbox_stream_position{source=jetstream:S outbox.>}"] != 0 {
		t.Errorf("a stream position without WithStreamPositions: %v", got)
	}
}

// A collector of a database that holds no inbox yet answers outbox_inbox_up 0 until it does.
func TestAnOpeningInboxCollectorAnswersUpZeroUntilTheInboxExists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "consumer.db")
	var heard error
	var ro *inbox.Inbox
	defer func() {
		if ro != nil {
			ro.Close()
		}
	}()
	reg := newRegistry(t, NewOpeningInboxCollector(func(ctx context.Context) (*inbox.Inbox, error) {
		var err error
		ro, err = inbox.OpenReadOnly(ctx, path)
		return ro, err
	}, WithErrorHandler(func(err error) { heard = err })))
	if got := gather(t, reg); len(got) != 1 || got["outbox_inbox_up"] != 0 || heard == nil {
		t.Fatalf("before the inbox exists: %v, heard %v", got, heard)
	}
	in, err := inbox.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if _, err := in.Apply(ctx, [][]byte{jline("a", 1)}, nothing); err != nil {
		t.Fatal(err)
	}
	if got := gather(t, reg); got["outbox_inbox_up"] != 1 || got["outbox_inbox_lines_applied_total"] != 1 {
		t.Fatalf("once the inbox exists: %v", got)
	}
	if errors.Is(heard, context.Canceled) {
		t.Fatal(heard)
	}
}
