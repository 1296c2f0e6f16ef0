// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/textmachine/outbox/internal/testing/crashtest"
)

// retentionWriter appends batches of three lines of run "r" to the journal in SEG_DIR with
// retention on (keep 0, and a cap when RET_CAP is set), moves reader "follower" to the journal's end
// after each batch, and prints each batch's last seq once Append has returned.
func retentionWriter() int {
	crashtest.ArmFromEnv()
	dir := os.Getenv("SEG_DIR")
	// A seal summary every third seal, so that retention deletes segments a summary holds.
	opts := []Option{WithSegmentSize(500), WithKeep(0), withSummaryEvery(3)}
	if c, _ := strconv.ParseInt(os.Getenv("RET_CAP"), 10, 64); c > 0 {
		opts = append(opts, WithMaxBytes(c))
	}
	batches, _ := strconv.Atoi(os.Getenv("SEG_BATCHES"))
	j, err := Open(dir, opts...)
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
		if err := SetReader(dir, "follower", j.Stats().End); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

func runRetentionWriter(t *testing.T, dir string, capBytes int64, batches int, env ...string) (acked int64, killed bool) {
	t.Helper()
	cmd := crashtest.Child(t, "retention-writer", append(env, "SEG_DIR="+dir, "RET_CAP="+strconv.FormatInt(capBytes, 10),
		"SEG_BATCHES="+strconv.Itoa(batches))...)
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

// checkRetained opens dir and checks that its retained segments hold run "r" densely from just
// after what retention recorded it deleted up to at least acked, and that the journal reads them
// back (a re-delivery of its last batch is compared with its copy).
func checkRetained(t *testing.T, dir string, acked int64) int64 {
	t.Helper()
	j, err := Open(dir, WithSegmentSize(500))
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
	info, err := Retained(dir)
	if err != nil {
		t.Fatal(err)
	}
	var gone int64
	for _, r := range info.Runs {
		if r.RunID == "r" {
			gone = r.LastSeq
		}
	}
	var seqs []int64
	for _, l := range bytes.Split(bytes.TrimSuffix(catDir(t, dir), []byte("\n")), []byte("\n")) {
		var v struct{ Seq int64 }
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		seqs = append(seqs, v.Seq)
	}
	if len(seqs) == 0 || seqs[0] > gone+1 || seqs[len(seqs)-1] != last {
		t.Fatalf("retained seqs %v..%v, retention recorded deleting up to %d, last %d", seqs[0], seqs[len(seqs)-1], gone, last)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("seq %d follows %d", seqs[i], seqs[i-1])
		}
	}
	if last >= 3 {
		if err := j.Append(context.Background(), "r", runBatch("r", last-2, 3, strings.Repeat("w", 40))); err != nil {
			t.Fatalf("a re-delivery of the last batch: %v", err)
		}
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) > 0 {
		t.Fatalf("Open left %v", tmp)
	}
	return last
}

func TestAJournalKilledAtEveryStepOfARetentionDeleteOpensAppendsAndReads(t *testing.T) {
	t.Parallel()
	points := []string{faultTrimLocked, faultTrimRecorded, faultTrimSegment, faultTrimIndex, faultStateTmp}
	for _, capBytes := range []int64{0, 1200} {
		for _, point := range points {
			for _, at := range []int{1, 2} {
				dir := filepath.Join(t.TempDir(), "j")
				if capBytes > 0 {
					// A stopped reader: only the cap deletes what it has not read.
					if err := os.MkdirAll(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := SetReader(dir, "stopped", 0); err != nil {
						t.Fatal(err)
					}
				}
				acked, killed := runRetentionWriter(t, dir, capBytes, 40, crashtest.KillAt(point, at)...)
				if !killed {
					t.Fatalf("cap %d, %s #%d: the writer was not killed", capBytes, point, at)
				}
				last := checkRetained(t, dir, acked)
				acked, _ = runRetentionWriter(t, dir, capBytes, 20)
				if acked != last+60 {
					t.Fatalf("cap %d, %s #%d: the next life acknowledged up to %d, from %d", capBytes, point, at, acked, last)
				}
				checkRetained(t, dir, acked)
				if info, err := Retained(dir); err != nil || info.DeletedSegments == 0 {
					t.Fatalf("cap %d, %s #%d: %+v, %v", capBytes, point, at, info, err)
				}
			}
		}
	}
}
