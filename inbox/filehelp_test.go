// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// relayJournal is a journal written the way an engine writes one: events enqueued in a real store,
// projected by a real relay into a journal.File.
type relayJournal struct {
	t    testing.TB
	path string
	s    *outbox.Store
	j    *journal.File
}

func newRelayJournal(t testing.TB, path string) *relayJournal {
	t.Helper()
	s, _ := outboxtest.Setup(t)
	r := &relayJournal{t: t, path: path, s: s}
	r.open()
	t.Cleanup(func() { r.j.Close() })
	return r
}

// open (re)opens the journal.File at the path, as a restarted writer would after a rotation.
func (r *relayJournal) open() {
	r.t.Helper()
	if r.j != nil {
		r.j.Close()
	}
	j, err := journal.OpenFile(r.path)
	if err != nil {
		r.t.Fatalf("OpenFile: %v", err)
	}
	r.j = j
}

// add enqueues n events to run and flushes the relay, so that they are in the journal.
func (r *relayJournal) add(run string, n int) {
	r.t.Helper()
	ctx := context.Background()
	for range n {
		if _, err := r.s.EnqueueEvent(ctx, run, journal.Builder(run, "unit", map[string]any{"cents": 100})); err != nil {
			r.t.Fatalf("EnqueueEvent: %v", err)
		}
	}
	// The tests write runs into the journal around the book (appendDirect, appendRaw), which a relay
	// would take for a book restored from an older backup.
	if err := outboxtest.NewRelay(r.t, r.s, r.j, run, outbox.WithBookCheck(false)).Flush(ctx); err != nil {
		r.t.Fatalf("Flush: %v", err)
	}
}

// appendDirect appends n lines of run after its seq from, with journal.File alone (no store): the
// quick way to a long journal.
func appendDirect(t testing.TB, j *journal.File, run string, from int64, n int) {
	t.Helper()
	const batch = 1000
	for done := 0; done < n; {
		k := min(batch, n-done)
		lines := make([]outbox.EventLine, k)
		for i := range lines {
			seq := from + int64(done+i)
			lines[i] = outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":"unit","data":{"cents":100}}`, run, seq)}
		}
		if err := j.Append(context.Background(), run, lines); err != nil {
			t.Fatalf("Append: %v", err)
		}
		done += k
	}
}

// fileLines is the model of how a journal splits into lines: the bytes before each newline, a '\r'
// included; what follows the last newline is not a line.
func fileLines(b []byte) [][]byte {
	parts := bytes.Split(b, []byte{'\n'})
	return parts[:len(parts)-1]
}

func readAllFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func journalPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "journal.jsonl")
}

// openTest opens path as a source would, failing the test on an error.
func openTest(t testing.TB, path string) *journalFile {
	t.Helper()
	jf, err := openJournalFile(path)
	if err != nil {
		t.Fatalf("openJournalFile(%s): %v", path, err)
	}
	t.Cleanup(jf.close)
	return jf
}

// readToEnd reads jf from p to its end in batches of b, and returns the lines and the position after
// them.
func readToEnd(t testing.TB, jf *journalFile, p FilePosition, b batchBounds) ([][]byte, FilePosition) {
	t.Helper()
	var all [][]byte
	for {
		end, err := jf.size()
		if err != nil {
			t.Fatal(err)
		}
		lines, next, err := jf.readBatch(p, end, b)
		if err != nil {
			t.Fatalf("readBatch at %d: %v", p.Offset, err)
		}
		if len(lines) == 0 {
			return all, p
		}
		if len(lines) > b.lines {
			t.Fatalf("a batch of %d lines, bound %d", len(lines), b.lines)
		}
		all = append(all, lines...)
		p = next
	}
}

// rewrite replaces the journal's content in place (same inode), as an editor or a truncation would.
func rewrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// replace puts b at path under a new inode (written beside it, then renamed over it).
func replace(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func appendRaw(t *testing.T, path string, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func (c *consumer) quarantine(run string) *Quarantine {
	c.t.Helper()
	qs, err := c.in.Quarantined(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	for _, q := range qs {
		if q.RunID == run {
			return &q
		}
	}
	return nil
}
