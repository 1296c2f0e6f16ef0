// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// A journal holding aa/1, aa/2, bb/1 is applied, then rewritten in place (same inode) as aa/1, cc/1,
// bb/1, aa/2, dd/1: its first line and the line that ends at the stored offset are what they were,
// but what comes before that line is not. The next start proves the prefix, finds it changed, and
// reads the file again from its start: cc/1 and dd/1 are applied, the rest are duplicates.
func TestAJournalRewrittenInPlaceUnderItsAnchorsIsReadAgainFromItsStart(t *testing.T) {
	for _, follow := range []bool{false, true} {
		path := journalPath(t)
		writeFile(t, path, jls(jl("aa", 1), jl("aa", 2), jl("bb", 1)))
		c := newConsumer(t, WithPollInterval(10*time.Millisecond))
		c.applyFile(path)
		before, _ := os.Stat(path)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(jls(jl("aa", 1), jl("cc", 1), jl("bb", 1), jl("aa", 2), jl("dd", 1))); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if after, _ := os.Stat(path); !os.SameFile(before, after) {
			t.Fatal("the rewrite made another file")
		}
		if follow {
			stop := c.follow(path, record)
			c.waitPosition("dd", 1)
			if err := stop(); !errors.Is(err, context.Canceled) {
				t.Fatalf("FollowFile: %v", err)
			}
		} else if rep := c.applyFile(path); rep != (Report{Applied: 2, Duplicates: 3}) {
			t.Fatalf("%+v, want 2 applied and 3 duplicates", rep)
		}
		wantApplied(t, c.applied(), map[string]int64{"aa": 2, "bb": 1, "cc": 1, "dd": 1})
		if qs, _ := c.in.Quarantined(context.Background()); len(qs) != 0 {
			t.Fatalf("follow %v: quarantined %+v", follow, qs)
		}
	}
}

// The digest of everything read before the position is carried on batch after batch: a position
// stored after many batches is that of the whole prefix, and the next call resumes from it.
func TestThePrefixDigestOfAPositionIsThatOfEverythingBeforeIt(t *testing.T) {
	path := journalPath(t)
	var all []string
	for s := int64(1); s <= 50; s++ {
		all = append(all, jl("a", s))
	}
	writeFile(t, path, jls(all...))
	c := newConsumer(t, WithBatchLines(7))
	c.applyFile(path)
	content := readAllFile(t, path)
	p := c.position(path)
	if p.Offset != int64(len(content)) || p.Prefix != sha256.Sum256(content) {
		t.Fatalf("position %v with prefix %x, want the digest of the %d bytes before it", p, p.Prefix, len(content))
	}
	appendRaw(t, path, jl("a", 51))
	if rep := c.applyFile(path); rep != (Report{Applied: 1}) {
		t.Fatalf("resumed: %+v", rep)
	}
}

// A position an earlier release stored (the first encoding, without the prefix digest) proves
// nothing of what was read before its last line: the file it names is read again from its start,
// what was applied coming back as duplicates, and, after a rotation, on to the new journal.
func TestAPositionOfTheFirstEncodingReadsItsFileAgainFromItsStart(t *testing.T) {
	for _, rotate := range []bool{false, true} {
		path := journalPath(t)
		writeFile(t, path, jls(jl("aa", 1), jl("aa", 2), jl("bb", 1)))
		c := newConsumer(t)
		c.applyFile(path)
		// The position as the earlier release stored it.
		p := *c.position(path)
		cur := p.encode()
		p.Prefix = [sha256.Size]byte{}
		old := p.encode()
		if old[0] != filePositionV1 {
			t.Fatalf("encoded as version %d", old[0])
		}
		if _, err := c.in.ApplyFrom(context.Background(), fileSourcePrefix+path, cur, old, nil, record); err != nil {
			t.Fatal(err)
		}
		if rotate {
			appendRaw(t, path, jl("cc", 1))
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
			writeFile(t, path, jl("dd", 1))
		} else {
			rewrite(t, path, []byte(jls(jl("aa", 1), jl("cc", 1), jl("bb", 1), jl("aa", 2), jl("dd", 1))))
		}
		if rep := c.applyFile(path); rep != (Report{Applied: 2, Duplicates: 3}) {
			t.Fatalf("rotate %v: %+v, want 2 applied and 3 duplicates", rotate, rep)
		}
		wantApplied(t, c.applied(), map[string]int64{"aa": 2, "bb": 1, "cc": 1, "dd": 1})
		if got := c.position(path); !got.proven() {
			t.Fatalf("the position stored after it has no prefix digest: %v", got)
		}
	}
}

// A copy of the journal (journal.jsonl.1 beside a journal cut under its position) that has its first
// line and the line at the position, but not what came before it, is not resumed inside: it is read
// from its start, then the journal; cc/1, only in the copy before the position, is applied.
func TestACopyThatDoesNotHoldTheWholePrefixIsReadFromItsStart(t *testing.T) {
	path := journalPath(t)
	writeFile(t, path, jls(jl("aa", 1), jl("aa", 2), jl("bb", 1)))
	c := newConsumer(t)
	c.applyFile(path)
	writeFile(t, path+".1", jls(jl("aa", 1), jl("cc", 1), jl("bb", 1), jl("aa", 2), jl("dd", 1)))
	rewrite(t, path, []byte(jl("ee", 1))) // cut and written again: the position is past its end
	if rep := c.applyFile(path); rep != (Report{Applied: 3, Duplicates: 3}) {
		t.Fatalf("%+v, want 3 applied and 3 duplicates", rep)
	}
	wantApplied(t, c.applied(), map[string]int64{"aa": 2, "bb": 1, "cc": 1, "dd": 1, "ee": 1})
}

// The journal cut and written again past the position between two batches of one call: the next
// batch finds the line at the position gone and reads the file again from its start, skipping none
// of the new lines.
func TestAJournalRewrittenBetweenTwoBatchesIsReadAgainFromItsStart(t *testing.T) {
	rj := newRelayJournal(t, journalPath(t))
	rj.add("a", 6)
	rj.j.Close()
	var b []byte
	for seq := 1; seq <= 40; seq++ {
		b = fmt.Appendf(b, "{\"engine_run_id\":\"b\",\"seq\":%d}\n", seq)
	}
	c := newConsumer(t, WithBatchLines(2))
	done := false
	afterFileCommit = func(string, FilePosition) {
		if !done {
			done = true
			rewrite(t, rj.path, b)
		}
	}
	defer func() { afterFileCommit = nil }()
	rep, err := c.in.ApplyFile(context.Background(), rj.path, record)
	if err != nil {
		t.Fatal(err)
	}
	got := c.applied()
	if got["a"] != 2 || rep.Quarantined != 0 || got["b"] < 1 {
		t.Fatalf("%+v, applied %v", rep, got)
	}
	c.applyFile(rj.path)
	wantApplied(t, c.applied(), map[string]int64{"a": 2, "b": 40})
}
