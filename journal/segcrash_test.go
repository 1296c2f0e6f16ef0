// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/internal/testing/crashtest"
)

func TestMain(m *testing.M) {
	crashtest.Main(m, map[string]func() int{"segment-writer": segmentWriter, "retention-writer": retentionWriter})
}

// segmentWriter appends batches of three lines of run "r" to the journal in SEG_DIR, at the segment
// size SEG_SIZE (with a checkpoint of the last segment every SEG_CKPT bytes, and a seal summary
// every SEG_SUMMARY seals, when set), going on from the run's last seq there, and prints each batch's last seq once Append
// has returned: what the journal has acknowledged.
func segmentWriter() int {
	crashtest.ArmFromEnv()
	size, _ := strconv.ParseInt(os.Getenv("SEG_SIZE"), 10, 64)
	batches, _ := strconv.Atoi(os.Getenv("SEG_BATCHES"))
	opts := []Option{WithSegmentSize(size)}
	if every, err := strconv.ParseInt(os.Getenv("SEG_CKPT"), 10, 64); err == nil {
		opts = append(opts, WithCheckpointEvery(every))
	}
	if every, err := strconv.Atoi(os.Getenv("SEG_SUMMARY")); err == nil {
		opts = append(opts, withSummaryEvery(every))
	}
	j, err := Open(os.Getenv("SEG_DIR"), opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	last, err := j.LastSeq("r")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for range batches {
		if err := j.Append(context.Background(), "r", runBatch("r", last+1, 3, strings.Repeat("w", 40))); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		last += 3
		fmt.Println(last)
	}
	return 0
}

// runWriter runs a segmentWriter life and returns the last seq it printed.
func runWriter(t *testing.T, dir string, size int64, batches int, env ...string) (acked int64, killed bool) {
	t.Helper()
	cmd := crashtest.Child(t, "segment-writer", append(env, "SEG_DIR="+dir,
		"SEG_SIZE="+strconv.FormatInt(size, 10), "SEG_BATCHES="+strconv.Itoa(batches))...)
	out, err := cmd.Output()
	killed = crashtest.Killed(err)
	if err != nil && !killed {
		t.Fatalf("writer: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		acked, _ = strconv.ParseInt(sc.Text(), 10, 64)
	}
	return acked, killed
}

// checkJournal opens dir and checks that it holds run "r" from seq 1 to at least acked, with no gap
// and no torn line, that every sealed segment's index, once the start has read them, is the
// index of that segment, that beside the last segment there is at most its checkpoint, and that the
// run index the start built (from a checkpoint or not) finds every seq it holds.
func checkJournal(t *testing.T, dir string, acked int64) int64 {
	t.Helper()
	j, err := Open(dir)
	if err != nil {
		t.Fatalf("open after the kill: %v", err)
	}
	defer j.Close()
	last, err := j.LastSeq("r")
	if err != nil {
		t.Fatal(err)
	}
	if last < acked || last > acked+3 {
		t.Fatalf("the journal holds run r up to %d, %d was acknowledged", last, acked)
	}
	rep, err := Verify(bytes.NewReader(catDir(t, dir)))
	if err != nil || rep.TornTail || rep.Runs["r"].Last != last || int64(rep.Lines) != last {
		t.Fatalf("verify after the kill: %+v, %v", rep, err)
	}
	segs := segmentsOf(t, dir)
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) > 0 {
		t.Fatalf("Open left %v", tmp)
	}
	tail := segs[len(segs)-1]
	if b, err := os.ReadFile(filepath.Join(dir, indexName(tail.base))); err == nil {
		ck, err := parseCheckpoint(b)
		if err != nil || ck.base != tail.base || ck.size > tail.size {
			t.Fatalf("beside the last segment (%d bytes at %d) is an index that is not its checkpoint: %+v, %v",
				tail.size, tail.base, ck, err)
		}
	}
	if last > 0 {
		rs := j.runs.runs["r"]
		for seq := int64(1); seq <= last; seq++ {
			if _, ok := rs.find(seq); !ok {
				t.Fatalf("the start's run index does not find seq %d of %d", seq, last)
			}
		}
	}
	var recs map[int64]summaryRecord
	if b, err := os.ReadFile(filepath.Join(dir, summaryName)); err == nil {
		if recs, err = parseSummary(b); err != nil {
			t.Fatalf("the seal summary after the start: %v", err)
		}
	}
	for _, s := range segs[:len(segs)-1] {
		b, err := os.ReadFile(filepath.Join(dir, indexName(s.base)))
		if err != nil {
			t.Fatalf("sealed segment %d has no index after the start: %v", s.base, err)
		}
		si, err := parseSegIndex(b)
		if err != nil || si.base != s.base || si.size != s.size {
			t.Fatalf("the index of segment %d: %+v, %v", s.base, si, err)
		}
		// A summary never holds another account of a segment than its own index.
		if r, ok := recs[s.base]; ok && !bytes.Equal(r.si.encode(), b) {
			t.Fatalf("the seal summary's record of segment %d is not its index", s.base)
		}
	}
	for base := range recs {
		if base >= tail.base {
			t.Fatalf("the seal summary holds a record of segment %d, which is not sealed", base)
		}
	}
	return last
}

func TestAJournalKilledAtEveryStepOfARollOpensWithEveryAcknowledgedLine(t *testing.T) {
	t.Parallel()
	points := []string{faultBeforeIndex, faultIndexTmp, faultAfterIndex, faultAfterRoll, faultpoint.JournalMidWrite, faultpoint.JournalBeforeSync}
	for _, point := range points {
		for _, at := range []int{1, 2} {
			dir := filepath.Join(t.TempDir(), "j")
			acked, killed := runWriter(t, dir, 500, 30, crashtest.KillAt(point, at)...)
			if !killed {
				t.Fatalf("%s #%d: the writer was not killed", point, at)
			}
			last := checkJournal(t, dir, acked)
			// The next life goes on from there, rolls again, and leaves a journal that opens.
			acked, _ = runWriter(t, dir, 500, 10)
			if acked != last+30 {
				t.Fatalf("%s #%d: the next life acknowledged up to %d, from %d", point, at, acked, last)
			}
			checkJournal(t, dir, acked)
		}
	}
}

func TestAnIndexWrittenBeforeAHardKillIsNotTrustedOnceItsSegmentGrew(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	acked, killed := runWriter(t, dir, 500, 30, crashtest.KillAt(faultAfterIndex, 1)...)
	if !killed {
		t.Fatal("the writer was not killed")
	}
	segs := segmentsOf(t, dir)
	tail := segs[len(segs)-1]
	if _, err := os.Stat(filepath.Join(dir, indexName(tail.base))); err != nil {
		t.Fatalf("the kill left no index beside the last segment: %v", err)
	}
	// The next life takes larger segments, so the segment the index describes grows past it before
	// it is sealed, and is killed as it seals it.
	acked2, killed := runWriter(t, dir, 5000, 100, crashtest.KillAt(faultAfterRoll, 1)...)
	if !killed || acked2 <= acked {
		t.Fatalf("the second life: acked %d (from %d), killed %v", acked2, acked, killed)
	}
	if s := segmentsOf(t, dir); s[len(s)-2].base != tail.base || s[len(s)-2].size <= tail.size {
		t.Fatalf("the segment did not grow: %v", s)
	}
	checkJournal(t, dir, acked2)
}

// TestTwoProcessesOpeningOneJournalAtOnceNeverBothAppend starts two writers on one directory (missing
// at first) at the same moment, several times: a writer either has the journal to itself or is
// refused with ErrLocked, and the journal always holds run "r" densely up to the last acknowledged
// seq, with no torn line and an index for every sealed segment.
func TestTwoProcessesOpeningOneJournalAtOnceNeverBothAppend(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "j")
	var acked int64
	for range 4 {
		var cmds [2]*exec.Cmd
		var outs [2]bytes.Buffer
		var errs [2]bytes.Buffer
		for i := range cmds {
			cmds[i] = crashtest.Child(t, "segment-writer", "SEG_DIR="+dir, "SEG_SIZE=500", "SEG_BATCHES=20")
			cmds[i].Stdout, cmds[i].Stderr = &outs[i], &errs[i]
		}
		for _, c := range cmds {
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
		}
		for i, c := range cmds {
			if err := c.Wait(); err != nil && !strings.Contains(errs[i].String(), ErrLocked.Error()) {
				t.Fatalf("a writer failed other than for the lock: %v: %s", err, errs[i].String())
			}
			sc := bufio.NewScanner(&outs[i])
			for sc.Scan() {
				n, _ := strconv.ParseInt(sc.Text(), 10, 64)
				acked = max(acked, n)
			}
		}
		checkJournal(t, dir, acked)
	}
}

func TestAJournalKilledAtEveryStepOfACheckpointOpensWithEveryAcknowledgedLine(t *testing.T) {
	t.Parallel()
	// A torn batch after a checkpoint too: Open cuts it back, and the checkpoint before it holds.
	points := []string{faultBeforeCheckpoint, faultCheckpointTmp, faultAfterCheckpoint,
		faultpoint.JournalMidWrite, faultpoint.JournalBeforeSync, faultBeforeIndex}
	for _, point := range points {
		for _, at := range []int{1, 2, 5} {
			dir := filepath.Join(t.TempDir(), "j")
			// Batches of about 210 bytes in segments of 1000: a checkpoint after each batch but the
			// one that rolls.
			acked, killed := runWriter(t, dir, 1000, 30, append(crashtest.KillAt(point, at), "SEG_CKPT=100")...)
			if !killed {
				t.Fatalf("%s #%d: the writer was not killed", point, at)
			}
			last := checkJournal(t, dir, acked)
			acked, _ = runWriter(t, dir, 1000, 10, "SEG_CKPT=100")
			if acked != last+30 {
				t.Fatalf("%s #%d: the next life acknowledged up to %d, from %d", point, at, acked, last)
			}
			checkJournal(t, dir, acked)
		}
	}
}

func TestAJournalKilledAtEveryStepOfASealSummaryOpensWithEveryAcknowledgedLine(t *testing.T) {
	t.Parallel()
	points := []string{faultBeforeSummary, faultSummaryTmp, faultAfterSummary}
	for _, point := range points {
		for _, at := range []int{1, 2} {
			dir := filepath.Join(t.TempDir(), "j")
			// Batches of about 210 bytes in segments of 500: a seal every other batch, a summary
			// every third seal.
			acked, killed := runWriter(t, dir, 500, 30, append(crashtest.KillAt(point, at), "SEG_SUMMARY=3")...)
			if !killed {
				t.Fatalf("%s #%d: the writer was not killed", point, at)
			}
			last := checkJournal(t, dir, acked)
			acked, _ = runWriter(t, dir, 500, 10, "SEG_SUMMARY=3")
			if acked != last+30 {
				t.Fatalf("%s #%d: the next life acknowledged up to %d, from %d", point, at, acked, last)
			}
			checkJournal(t, dir, acked)
			if _, err := os.Stat(filepath.Join(dir, summaryName)); err != nil {
				t.Fatalf("%s #%d: no seal summary after the next life: %v", point, at, err)
			}
		}
	}
}
