// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

var smallBatches = batchBounds{lines: 3, bytes: 300, maxLine: 1 << 20}

// A journal written by a relay, then lines with a '\r' before their newline and a torn tail: the
// source's lines are the model's, byte for byte, and as many as journal.Verify counts.
func TestLinesAreSplitAndTakenExactlyAsVerifyDoes(t *testing.T) {
	path := journalPath(t)
	rj := newRelayJournal(t, path)
	rj.add("a", 5)
	rj.j.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("{\"engine_run_id\":\"a\",\"seq\":6}\r\n{\"engine_run_id\":\"a\",\"seq\":7} \r\n{\"engine_run_id\":\"a\",\"seq\":8")
	f.Close()

	content := readAllFile(t, path)
	jf := openTest(t, path)
	for _, b := range []batchBounds{smallBatches, {lines: 1, bytes: 1, maxLine: 1 << 20}, {lines: 1000, bytes: 1 << 20, maxLine: 1 << 20}} {
		got, end := readToEnd(t, jf, jf.start(), b)
		if diff := cmp.Diff(fileLines(content), got); diff != "" {
			t.Fatalf("bounds %+v: lines (-want +got):\n%s", b, diff)
		}
		if want := int64(bytes.LastIndexByte(content, '\n') + 1); end.Offset != want {
			t.Fatalf("bounds %+v: consumed to %d, the last newline ends at %d", b, end.Offset, want)
		}
		if !bytes.HasSuffix(got[5], []byte("\r")) {
			t.Fatalf("the '\\r' before the newline was not kept: %q", got[5])
		}
		rep, err := journal.Verify(bytes.NewReader(content))
		if err != nil || rep.Lines != len(got) || !rep.TornTail {
			t.Fatalf("Verify: %+v, %v; the source read %d lines", rep, err, len(got))
		}
	}
}

// Lines far longer than the ones before them are read whole, however the read was sized.
func TestALongLineAfterShortOnesIsReadWhole(t *testing.T) {
	path := journalPath(t)
	var b bytes.Buffer
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "{\"engine_run_id\":\"a\",\"seq\":%d}\n", i)
	}
	fmt.Fprintf(&b, "{\"engine_run_id\":\"a\",\"seq\":101,\"pad\":%q}\n", strings.Repeat("x", 200<<10))
	fmt.Fprintf(&b, "{\"engine_run_id\":\"a\",\"seq\":102}\n")
	os.WriteFile(path, b.Bytes(), 0o644)
	jf := openTest(t, path)
	got, _ := readToEnd(t, jf, jf.start(), batchBounds{lines: 10, bytes: 1 << 20, maxLine: 1 << 20})
	want := fileLines(b.Bytes())
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("line %d: %d bytes %.40q, want %d bytes %.40q", i, len(got[i]), got[i], len(want[i]), want[i])
		}
	}
}

// The bytes after the last newline are never taken, whether the writer is still writing them or will
// cut them: the position stays before them until their newline comes.
func TestALineWithoutItsNewlineIsNeverConsumed(t *testing.T) {
	path := journalPath(t)
	os.WriteFile(path, []byte("{\"engine_run_id\":\"a\",\"seq\":1}\n{\"engine_run_id\":\"a\",\"seq\":2}"), 0o644)
	jf := openTest(t, path)
	got, p := readToEnd(t, jf, jf.start(), smallBatches)
	if len(got) != 1 || p.Offset != 30 {
		t.Fatalf("got %q to byte %d; want the first line alone, to byte 30", got, p.Offset)
	}
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("\n")
	f.Close()
	got, p = readToEnd(t, jf, p, smallBatches)
	if len(got) != 1 || string(got[0]) != `{"engine_run_id":"a","seq":2}` || p.Offset != 60 {
		t.Fatalf("after the newline: %q to byte %d", got, p.Offset)
	}
}

// A line longer than the limit is malformed, found without holding more than the limit of it; the
// lines before it are given first, with their position.
func TestALineOverTheLimitIsMalformedAndTheLinesBeforeItComeFirst(t *testing.T) {
	path := journalPath(t)
	long := `{"engine_run_id":"a","seq":2,"pad":"` + strings.Repeat("x", 5000) + `"}`
	os.WriteFile(path, []byte("{\"engine_run_id\":\"a\",\"seq\":1}\n"+long+"\n"), 0o644)
	jf := openTest(t, path)
	for _, b := range []batchBounds{{lines: 10, bytes: 100, maxLine: 1000}, {lines: 10, bytes: 1 << 20, maxLine: 1000}} {
		size, _ := jf.size()
		lines, p, err := jf.readBatch(jf.start(), size, b)
		if err != nil || len(lines) != 1 {
			t.Fatalf("bounds %+v: first batch %q, %v", b, lines, err)
		}
		_, q, err := jf.readBatch(p, size, b)
		if !errors.Is(err, journal.ErrMalformed) || !strings.Contains(err.Error(), "at byte 30") {
			t.Fatalf("bounds %+v: the long line gave %v; want journal.ErrMalformed at byte 30", b, err)
		}
		if q != p {
			t.Fatalf("the position moved past the long line: %v", q)
		}
	}
	// Exactly at the limit it is a line.
	lines, _, err := jf.readBatch(FilePosition{Offset: 30}, int64(30+len(long)+1), batchBounds{lines: 10, bytes: 100, maxLine: len(long)})
	if err != nil || len(lines) != 1 || string(lines[0]) != long {
		t.Fatalf("a line at the limit: %d lines, %v", len(lines), err)
	}
}

// A batch holds at most the bound's lines, and about its bytes: one longer line goes alone.
func TestBatchesAreBoundedInLinesAndBytes(t *testing.T) {
	path := journalPath(t)
	j, err := journal.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	appendDirect(t, j, "a", 1, 200)
	j.Close()
	jf := openTest(t, path)
	size, _ := jf.size()
	b := batchBounds{lines: 7, bytes: 1000, maxLine: 1 << 20}
	for p := jf.start(); ; {
		lines, next, err := jf.readBatch(p, size, b)
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) == 0 {
			break
		}
		n := 0
		for _, l := range lines {
			n += len(l) + 1
		}
		if len(lines) > b.lines || n > b.bytes {
			t.Fatalf("a batch of %d lines, %d bytes; bounds %+v", len(lines), n, b)
		}
		p = next
	}
}

// The position a batch ends at names the file, the offset, the first bytes, the last line and the
// digest of everything before it, so that it can be checked against the file later.
func TestThePositionHoldsTheIdentityTheFingerprintAndTheLastLine(t *testing.T) {
	path := journalPath(t)
	rj := newRelayJournal(t, path)
	rj.add("a", 3)
	content := readAllFile(t, path)
	jf := openTest(t, path)
	lines, p := readToEnd(t, jf, jf.start(), smallBatches)
	st, _ := os.Stat(path)
	dev, ino := fileID(st)
	want := FilePosition{
		Path: path, Device: dev, Inode: ino, Offset: int64(len(content)),
		FingerprintLen: len(lines[0]) + 1, Fingerprint: sha256.Sum256(content[:len(lines[0])+1]),
		LastLineLen: len(lines[2]), LastLine: sha256.Sum256(lines[2]),
		Prefix: sha256.Sum256(content),
	}
	if p != want {
		t.Fatalf("position %+v, want %+v", p, want)
	}
	if ok, err := jf.holds(p); !ok || err != nil {
		t.Fatalf("the file does not hold its own position: %v, %v", ok, err)
	}
}

// A position is trusted only while the file still holds what it was taken of: a shorter file, other
// first bytes, or another line ending at the offset (a truncation regrown past the old size with
// other lines) are each told apart.
func TestAPositionIsCheckedAgainstTheFileBeforeItIsTrusted(t *testing.T) {
	path := journalPath(t)
	rj := newRelayJournal(t, path)
	rj.add("a", 60)
	rj.j.Close()
	content := readAllFile(t, path)
	jf := openTest(t, path)
	_, p := readToEnd(t, jf, jf.start(), smallBatches)
	lines := fileLines(content)
	last := len(lines) - 1
	keep := bytes.IndexByte(content[fingerprintSize:], '\n') + fingerprintSize + 1
	if p.FingerprintLen != len(lines[0])+1 || keep >= len(content) {
		t.Fatalf("the journal is too short for the test: %d bytes", len(content))
	}

	cases := map[string][]byte{
		"truncated":                content[:len(content)-1],
		"the last line changed":    bytes.Replace(content, lines[last], bytes.Replace(lines[last], []byte("100"), []byte("999"), 1), 1),
		"the first bytes changed":  bytes.Replace(content, lines[0], bytes.Replace(lines[0], []byte("100"), []byte("999"), 1), 1),
		"regrown past its old end": append(append([]byte{}, content[:keep]...), bytes.Repeat([]byte("{\"engine_run_id\":\"b\",\"seq\":1}\n"), 400)...),
		"its last line shifted":    append([]byte("{}\n"), content[:len(content)-3]...),
	}
	for name, b := range cases {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if ok, err := jf.holds(p); ok || err != nil {
			t.Errorf("%s: the file still holds the position (%v)", name, err)
		}
	}
	os.WriteFile(path, append(content, []byte("{\"engine_run_id\":\"a\",\"seq\":61}\n")...), 0o644)
	if ok, err := jf.holds(p); !ok || err != nil {
		t.Errorf("grown by a line: the position is not trusted (%v)", err)
	}
}

// A torn tail (a line the writer has not finished, or will cut at its next open) is not applied;
// once its newline comes it is, once.
func TestATornTailIsAppliedOnlyOnceItsNewlineComes(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 2)
	rj.j.Close()
	appendRaw(t, rj.path, `{"engine_run_id":"t","seq":1`)
	c := newConsumer(t)
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 2}) {
		t.Fatalf("with a torn tail: %+v", rep)
	}
	appendRaw(t, rj.path, "}\n")
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 1}) {
		t.Fatalf("once its newline came: %+v", rep)
	}
	// The writer cuts a torn tail at its next open; the source never took it.
	appendRaw(t, rj.path, `{"engine_run_id":"t","seq":2,"cut`)
	if rep := c.applyFile(rj.path); rep != (Report{}) {
		t.Fatalf("a second torn tail: %+v", rep)
	}
	rj.open()
	rj.add("a", 2)
	if rep := c.applyFile(rj.path); rep != (Report{Applied: 2}) {
		t.Fatalf("after the writer cut the tail: %+v", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 4, "t": 1})
}

// Run ids chosen to be mistaken for one another are each a run of their own, exactly as the
// journal keys them; a lone surrogate, which decoders turn into U+FFFD, stops the call as malformed,
// naming where the line is, with the lines before it applied.
func TestHostileRunIdsAreKeptApartAndALoneSurrogateStopsTheCall(t *testing.T) {
	path := journalPath(t)
	j, err := journal.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "a ", "A", "a\u0000", "a\n", "\u202ea", "\xef\xbf\xbd", strings.Repeat("r", 4000)}
	for _, id := range ids {
		line, _ := journal.Builder(id, "unit", nil)(1)
		if err := j.Append(context.Background(), id, []outbox.EventLine{{Seq: 1, Line: line}}); err != nil {
			t.Fatalf("append %q: %v", id, err)
		}
	}
	j.Close()
	size := len(readAllFile(t, path))
	// A good line after it, or the file is not a journal at all (its last line is checked).
	appendRaw(t, path, `{"engine_run_id":"\ud800","seq":1}`+"\n"+`{"engine_run_id":"z","seq":1}`+"\n")
	c := newConsumer(t)
	seen := map[string]bool{}
	rep, err := c.in.ApplyFile(context.Background(), path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
		seen[ev.RunID] = true
		return record(ctx, tx, ev)
	})
	if !errors.Is(err, journal.ErrMalformed) || !strings.Contains(err.Error(), fmt.Sprintf("byte %d", size)) {
		t.Fatalf("%v; want journal.ErrMalformed naming byte %d", err, size)
	}
	if rep.Applied != len(ids) || len(seen) != len(ids) {
		t.Fatalf("report %+v, %d runs seen; want %d runs applied", rep, len(seen), len(ids))
	}
}

// A line over the limit stops the call with journal.ErrMalformed naming where it is; the lines
// before it are applied with their position, and the call stops there again next time.
func TestALineOverTheLimitStopsTheCallWhereItIs(t *testing.T) {
	path := journalPath(t)
	j, err := journal.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	appendDirect(t, j, "a", 1, 2)
	long := fmt.Sprintf(`{"engine_run_id":"a","seq":3,"pad":%q}`, strings.Repeat("x", 300))
	if err := j.Append(context.Background(), "a", []outbox.EventLine{{Seq: 3, Line: []byte(long)}}); err != nil {
		t.Fatal(err)
	}
	appendDirect(t, j, "a", 4, 2)
	j.Close()
	before := len(fileLines(readAllFile(t, path))[0]) + len(fileLines(readAllFile(t, path))[1]) + 2
	c := newConsumer(t, WithMaxLineSize(200))
	for range 2 {
		rep, err := c.in.ApplyFile(context.Background(), path, record)
		if !errors.Is(err, journal.ErrMalformed) || !strings.Contains(err.Error(), fmt.Sprintf("byte %d", before)) {
			t.Fatalf("%v; want journal.ErrMalformed at byte %d", err, before)
		}
		if p := c.position(path); p == nil || p.Offset != int64(before) {
			t.Fatalf("position %+v, want at %d", p, before)
		}
		_ = rep
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 2})
}

// Lines ending in "\r\n" are journal lines for journal.Verify; the handler gets them with their
// '\r', exactly the bytes before the newline.
func TestCRLFLinesAreAppliedWithTheirCarriageReturn(t *testing.T) {
	path := journalPath(t)
	j, err := journal.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for seq := int64(1); seq <= 3; seq++ {
		line := fmt.Appendf(nil, "{\"engine_run_id\":\"a\",\"seq\":%d}\r", seq)
		if err := j.Append(context.Background(), "a", []outbox.EventLine{{Seq: seq, Line: line}}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	c := newConsumer(t)
	var got [][]byte
	rep, err := c.in.ApplyFile(context.Background(), path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
		got = append(got, ev.Line)
		return record(ctx, tx, ev)
	})
	if err != nil || rep.Applied != 3 {
		t.Fatalf("%+v, %v", rep, err)
	}
	if want := fileLines(readAllFile(t, path)); fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) || !bytes.HasSuffix(got[0], []byte("\r")) {
		t.Fatalf("lines %q, want %q", got, want)
	}
}

// Lines of two runs interleaved in the journal: each run's lines are applied in seq order, each
// once.
func TestTwoRunsInterleavedAreEachAppliedInOrder(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	for range 5 {
		rj.add("a", 3)
		rj.add("b", 2)
	}
	c := newConsumer(t, WithBatchLines(4))
	last := map[string]int64{}
	rep, err := c.in.ApplyFile(context.Background(), rj.path, func(ctx context.Context, tx *sql.Tx, ev Event) error {
		if ev.Seq != last[ev.RunID]+1 {
			return fmt.Errorf("run %s: seq %d after %d", ev.RunID, ev.Seq, last[ev.RunID])
		}
		last[ev.RunID] = ev.Seq
		return record(ctx, tx, ev)
	})
	if err != nil || rep.Applied != 25 {
		t.Fatalf("%+v, %v", rep, err)
	}
	wantApplied(t, c.applied(), map[string]int64{"a": 15, "b": 10})
}
