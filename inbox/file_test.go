// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/journal"
)

// consumer is an inbox with a table of its own that its handler fills: one row per applied line.
type consumer struct {
	t    testing.TB
	in   *Inbox
	path string
	opts []Option
}

func newConsumer(t testing.TB, opts ...Option) *consumer {
	t.Helper()
	c := &consumer{t: t, path: filepath.Join(t.TempDir(), "consumer.db"), opts: opts}
	c.open()
	if err := c.in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE applied (run TEXT NOT NULL, seq INTEGER NOT NULL, line BLOB NOT NULL, PRIMARY KEY (run, seq))`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *consumer) open() {
	c.t.Helper()
	in, err := Open(context.Background(), c.path, c.opts...)
	if err != nil {
		c.t.Fatalf("Open: %v", err)
	}
	c.in = in
	c.t.Cleanup(func() { in.Close() })
}

// reopen closes the inbox and opens it again, as the next process would.
func (c *consumer) reopen() {
	c.t.Helper()
	if err := c.in.Close(); err != nil {
		c.t.Fatal(err)
	}
	c.open()
}

// record is the consumer's handler: it inserts the line, so that a line applied twice fails the
// test by its primary key.
func record(ctx context.Context, tx *sql.Tx, ev Event) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO applied (run, seq, line) VALUES (?, ?, ?)`, ev.RunID, ev.Seq, ev.Line)
	return err
}

// applied returns, per run, how many lines the consumer's table holds, checking that they are
// 1..n.
func (c *consumer) applied() map[string]int64 {
	c.t.Helper()
	rows, err := outboxtest.RawDB(c.t, c.path).Query(`SELECT run, count(*), max(seq) FROM applied GROUP BY run`)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var run string
		var n, last int64
		if err := rows.Scan(&run, &n, &last); err != nil {
			c.t.Fatal(err)
		}
		if n != last {
			c.t.Fatalf("run %q: %d lines applied, the last seq %d: a line was skipped", run, n, last)
		}
		out[run] = n
	}
	return out
}

// position decodes the stored position of path's source.
func (c *consumer) position(path string) *FilePosition {
	c.t.Helper()
	abs, _ := filepath.Abs(path)
	b, err := c.in.SourcePosition(context.Background(), fileSourcePrefix+abs)
	if err != nil {
		c.t.Fatal(err)
	}
	if b == nil {
		return nil
	}
	p, err := ParseFilePosition(b)
	if err != nil {
		c.t.Fatal(err)
	}
	return &p
}

func (c *consumer) applyFile(path string) Report {
	c.t.Helper()
	rep, err := c.in.ApplyFile(context.Background(), path, record)
	if err != nil {
		c.t.Fatalf("ApplyFile: %v", err)
	}
	return rep
}

func wantApplied(t testing.TB, got map[string]int64, want map[string]int64) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("applied %v, want %v", got, want)
	}
}

// Each line is applied once, its position stored with its effects under "file:" and the absolute
// path; a second call finds nothing new.
func TestApplyFileAppliesEachLineOnceAndStoresThePositionWithTheEffects(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 5)
	rj.add("b", 3)
	rj.add("a", 2)
	c := newConsumer(t)
	rep := c.applyFile(rj.path)
	if rep != (Report{Applied: 10}) {
		t.Fatalf("report %+v", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 7, "b": 3})
	size := int64(len(readAllFile(t, rj.path)))
	if p := c.position(rj.path); p == nil || p.Offset != size || p.Path != rj.path {
		t.Fatalf("position %+v, want %s at %d", p, rj.path, size)
	}
	if rep := c.applyFile(rj.path); rep != (Report{}) {
		t.Fatalf("again: %+v", rep)
	}
	srcs, err := c.in.Sources(context.Background())
	if err != nil || len(srcs) != 1 || srcs[0].Name != "file:"+rj.path {
		t.Fatalf("Sources: %+v, %v", srcs, err)
	}
}

// A relative path is the same source as its absolute form.
func TestASourceIsKeyedByItsAbsolutePath(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 2)
	c := newConsumer(t)
	c.applyFile(rj.path)
	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	os.Chdir(filepath.Dir(rj.path))
	rj.add("a", 1)
	if rep := c.applyFile("journal.jsonl"); rep != (Report{Applied: 1}) {
		t.Fatalf("through a relative path: %+v", rep)
	}
}

// "To the end" is the end when the call began: lines appended while it runs are left for the next.
func TestApplyFileStopsAtTheEndTheFileHadWhenItBegan(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 5)
	c := newConsumer(t, WithBatchLines(1))
	more := int64(6)
	rep, err := c.in.ApplyFile(context.Background(), rj.path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
		appendDirect(t, rj.j, "a", more, 1)
		more++
		return record(ctx, tx, ev)
	})
	if err != nil || rep.Applied != 5 {
		t.Fatalf("%+v, %v; want the 5 lines there when it began", rep, err)
	}
	if rep := c.applyFile(rj.path); rep.Applied != 5 {
		t.Fatalf("the next call: %+v", rep)
	}
}

// A handler's error stops the call: the batches before it are committed with their position, the
// Report counts them, and the next call goes on from there, applying each line once.
func TestAnErrorLeavesTheBatchesBeforeItCommittedWithTheirPosition(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 10)
	c := newConsumer(t, WithBatchLines(3))
	boom := errors.New("boom")
	rep, err := c.in.ApplyFile(context.Background(), rj.path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
		if ev.Seq == 8 {
			return boom
		}
		return record(ctx, tx, ev)
	})
	if !errors.Is(err, boom) || rep.Applied != 6 {
		t.Fatalf("%+v, %v; want the two batches before seq 8 applied and boom", rep, err)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 6})
	lines := fileLines(readAllFile(t, rj.path))
	end := 0
	for _, l := range lines[:6] {
		end += len(l) + 1
	}
	if p := c.position(rj.path); p.Offset != int64(end) {
		t.Fatalf("position at %d, want %d (after seq 6)", p.Offset, end)
	}
	if rep := c.applyFile(rj.path); rep.Applied != 4 {
		t.Fatalf("the next call: %+v", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 10})
}

// A path that names nothing is fs.ErrNotExist for ApplyFile; a file that is not a journal is
// journal.ErrNotJournal, and nothing is applied or stored.
func TestAFileThatIsNotAJournalAppliesNothing(t *testing.T) {
	c := newConsumer(t)
	path := journalPath(t)
	if _, err := c.in.ApplyFile(context.Background(), path, record); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no file: %v", err)
	}
	for name, content := range map[string]string{
		"a database": "SQLite format 3\x00" + strings.Repeat("\x00", 100),
		"a log":      "{\"engine_run_id\":\"a\",\"seq\":1}\nstarted\n",
	} {
		os.WriteFile(path, []byte(content), 0o644)
		rep, err := c.in.ApplyFile(context.Background(), path, record)
		if !errors.Is(err, journal.ErrNotJournal) || rep != (Report{}) {
			t.Fatalf("%s: %+v, %v; want journal.ErrNotJournal", name, rep, err)
		}
		if c.position(path) != nil || len(c.applied()) != 0 {
			t.Fatalf("%s: something was applied or stored", name)
		}
	}
}

// A context that ends inside a batch costs that batch alone: the batches before it are committed with
// their position, the call returns the context's error (FollowFile: ctx.Err() itself), and the next
// call goes on from there.
func TestAContextEndingMidCallKeepsTheBatchesBeforeIt(t *testing.T) {
	for _, follow := range []bool{false, true} {
		rj := newRelayJournal(t, journalPath(t))
		rj.add("a", 8)
		c := newConsumer(t, WithBatchLines(2))
		ctx, cancel := context.WithCancel(context.Background())
		h := func(hctx context.Context, tx *sql.Tx, ev Event) error {
			if ev.Seq == 5 {
				cancel()
			}
			return record(hctx, tx, ev)
		}
		var err error
		var rep Report
		if follow {
			err = c.in.FollowFile(ctx, rj.path, h)
		} else {
			rep, err = c.in.ApplyFile(ctx, rj.path, h)
		}
		if !errors.Is(err, context.Canceled) || (follow && err != context.Canceled) {
			t.Fatalf("follow %v: %v, want context.Canceled", follow, err)
		}
		if !follow && rep != (Report{Applied: 4}) {
			t.Fatalf("report %+v", rep)
		}
		wantApplied(t, c.applied(), map[string]int64{"a": 4})
		if rep := c.applyFile(rj.path); rep != (Report{Applied: 4}) {
			t.Fatalf("follow %v: the next call: %+v", follow, rep)
		}
	}
}

// A handler's panic reaches the caller as a panic, with the batches before it committed and the
// inbox usable.
func TestAHandlersPanicLeavesTheBatchesBeforeItAndTheInboxUsable(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 6)
	c := newConsumer(t, WithBatchLines(2))
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the handler's panic", r)
			}
		}()
		c.in.ApplyFile(context.Background(), rj.path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
			if ev.Seq == 3 {
				panic("boom")
			}
			return record(ctx, tx, ev)
		})
	}()
	wantApplied(t, c.applied(), map[string]int64{"a": 2})
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 4}) {
		t.Fatalf("after the panic: %+v", rep)
	}
}

// Bad arguments are refused before anything is read or stored.
func TestApplyFileRefusesBadArguments(t *testing.T) {
	c := newConsumer(t)
	for _, tc := range []struct {
		path string
		h    Handler
	}{{"", record}, {journalPath(t), nil}, {"/tmp/a\x01b", record}, {"/tmp/\xff", record}} {
		if _, err := c.in.ApplyFile(context.Background(), tc.path, tc.h); err == nil {
			t.Errorf("ApplyFile(%q, handler %v) took it", tc.path, tc.h != nil)
		}
		if err := c.in.FollowFile(context.Background(), tc.path, tc.h); err == nil {
			t.Errorf("FollowFile(%q, handler %v) took it", tc.path, tc.h != nil)
		}
	}
	if srcs, _ := c.in.Sources(context.Background()); len(srcs) != 0 {
		t.Fatalf("sources stored: %+v", srcs)
	}
}

// A line removed from the journal: its run is quarantined as a gap at that seq, the lines after it
// are not applied, and the other run goes on.
func TestALineRemovedQuarantinesItsRunAsAGap(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 6)
	rj.add("b", 3)
	rj.j.Close()
	lines := fileLines(readAllFile(t, rj.path))
	rewrite(t, rj.path, append(bytes.Join(append(lines[:2:2], lines[3:]...), []byte{'\n'}), '\n'))
	c := newConsumer(t)
	rep := c.applyFile(rj.path)
	if rep != (Report{Applied: 5, Quarantined: 3}) {
		t.Fatalf("report %+v", rep)
	}
	if q := c.quarantine("a"); q == nil || q.Reason != "gap" || q.Expected != 3 || q.Got != 4 {
		t.Fatalf("quarantine %+v", q)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 2, "b": 3})
}

// A line applied and then found changed (the journal replaced by an edited copy, so read again from
// its start): its run is quarantined as a conflict, never applied twice.
func TestALineChangedQuarantinesItsRunAsAConflict(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 4)
	rj.add("b", 2)
	rj.j.Close()
	c := newConsumer(t)
	c.applyFile(rj.path)
	content := readAllFile(t, rj.path)
	lines := fileLines(content)
	edited := bytes.Replace(lines[1], []byte(`"cents":100`), []byte(`"cents":999`), 1)
	replace(t, rj.path, bytes.Replace(content, lines[1], edited, 1))
	rep := c.applyFile(rj.path)
	if rep != (Report{Duplicates: 3, Quarantined: 3}) {
		t.Fatalf("report %+v", rep)
	}
	if q := c.quarantine("a"); q == nil || q.Reason != "conflict" || q.Got != 2 {
		t.Fatalf("quarantine %+v", q)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 4, "b": 2})
}
