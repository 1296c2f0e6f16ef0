// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/textmachine/outbox/journal"
	"github.com/textmachine/outbox/outbox"
)

// segmentedJournal writes run "r" into a journal directory of small segments and returns it with
// its segments' positions.
func segmentedJournal(t *testing.T) (string, []int64) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "journal")
	j, err := journal.Open(dir, journal.WithSegmentSize(400))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for i := range 20 {
		var lines []outbox.EventLine
		for k := range 3 {
			seq := int64(3*i + k + 1)
			lines = append(lines, outbox.EventLine{Seq: seq, Line: fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"w":"%s"}`, seq, strings.Repeat("x", 40))})
		}
		if err := j.Append(context.Background(), "r", lines); err != nil {
			t.Fatal(err)
		}
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var bases []int64
	for _, n := range names {
		var b int64
		fmt.Sscanf(filepath.Base(n), "%d.jsonl", &b)
		bases = append(bases, b)
	}
	return dir, bases
}

func TestJournalStatusShowsTheReadersLagAndWhatATrimWouldDeleteAndWhyNotYet(t *testing.T) {
	dir, bases := segmentedJournal(t)
	if err := journal.SetReader(dir, "caught-up", bases[len(bases)-1]); err != nil {
		t.Fatal(err)
	}
	if err := journal.SetReader(dir, "slow", bases[2]); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "journal", "status", dir)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		fmt.Sprintf("segments: %d, from byte 0", len(bases)),
		`slow at byte ` + fmt.Sprint(bases[2]),
		fmt.Sprintf("in %d segments", len(bases)-2),
		"would delete: 2 segments",
		fmt.Sprintf("not yet: %020d.jsonl and every later segment stay: a reader has not read it (slow)", bases[2]),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = cli(t, "journal", "status", "--keep", "1h", dir)
	if code != exitOK || !strings.Contains(out, "would delete: 0 segments") || !strings.Contains(out, "younger than the keep duration") {
		t.Errorf("status --keep 1h: %d\n%s", code, out)
	}
	code, out, _ = cli(t, "journal", "status", "--json", "--max-bytes", "1000", dir)
	var rep journalStatusReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Readers) != 2 || len(rep.WouldDelete) < 3 ||
		len(rep.WouldDelete[2].Behind) != 1 || rep.WouldDelete[2].Behind[0] != "slow" {
		t.Errorf("status --json --max-bytes 1000: %d\n%s", code, out)
	}
}

func TestJournalTrimDeletesWhatEveryReaderHasReadAndIsRefusedWhileTheEngineHasItOpen(t *testing.T) {
	dir, bases := segmentedJournal(t)
	if err := journal.SetReader(dir, "slow", bases[2]); err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli(t, "journal", "trim", dir)
	j.Close()
	if code != exitUsage || !strings.Contains(errOut, "is the engine running?") {
		t.Fatalf("trim beside the engine: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut := cli(t, "journal", "trim", dir)
	if code != exitOK || errOut != "" || !strings.Contains(out, "deleted 2 segments") || !strings.Contains(out, "(slow)") {
		t.Fatalf("trim: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("%020d.jsonl", bases[1]))); !os.IsNotExist(err) {
		t.Fatalf("a segment every reader read is still there: %v", err)
	}
	code, out, errOut = cli(t, "journal", "trim", "--max-bytes", "1", dir)
	if code != exitOK || !strings.Contains(errOut, "readers left behind: slow") || !strings.Contains(out, "1 segment left") {
		t.Fatalf("trim --max-bytes 1: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, _ = cli(t, "journal", "status", dir)
	if code != exitOK || !strings.Contains(out, "retention deleted lines it had not applied") || !strings.Contains(out, "under the cap") {
		t.Fatalf("status after the cap: %d\n%s", code, out)
	}
}

func TestJournalReadersRmRefusesAReaderThatHasNotReadEverythingWithoutForce(t *testing.T) {
	dir, _ := segmentedJournal(t)
	if err := journal.SetReader(dir, "gone", 0); err != nil {
		t.Fatal(err)
	}
	code, out, _ := cli(t, "journal", "readers", dir)
	if code != exitOK || !strings.Contains(out, "gone at byte 0") {
		t.Fatalf("readers: %d %q", code, out)
	}
	code, _, errOut := cli(t, "journal", "readers", "rm", "gone", dir)
	if code != exitUsage || !strings.Contains(errOut, "--force") {
		t.Fatalf("rm without --force: %d %q", code, errOut)
	}
	code, _, errOut = cli(t, "journal", "readers", "rm", "../x", dir)
	if code != exitUsage || !strings.Contains(errOut, "invalid reader name") {
		t.Fatalf("rm of a bad name: %d %q", code, errOut)
	}
	code, out, errOut = cli(t, "journal", "readers", "rm", "gone", dir, "--force")
	if code != exitOK || !strings.Contains(out, "removed reader gone") {
		t.Fatalf("rm --force: %d %q %q", code, out, errOut)
	}
	code, _, errOut = cli(t, "journal", "readers", "rm", "gone", dir, "--force")
	if code != exitUsage || !strings.Contains(errOut, "no reader") {
		t.Fatalf("rm of a reader not registered: %d %q", code, errOut)
	}
	code, out, _ = cli(t, "journal", "readers", dir)
	if code != exitOK || !strings.Contains(out, "none registered") {
		t.Fatalf("readers after rm: %d %q", code, out)
	}
}

func TestJournalStatusOfADirectoryThatIsNotAJournalFails(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "gone.reader"), []byte("torn"), 0o644)
	for _, args := range [][]string{{"journal", "status", dir}, {"journal", "readers", dir}, {"journal", "trim", dir},
		{"journal", "status", filepath.Join(dir, "missing")}} {
		code, _, errOut := cli(t, args...)
		if code != exitUsage || !strings.HasPrefix(errOut, "outbox "+strings.Join(args[:2], " ")+": ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
	for _, args := range [][]string{{"journal", "status"}, {"journal", "trim", "a", "b"}, {"journal", "trim", "--keep", "-1s", dir},
		{"journal", "readers", "rm", "x"}, {"journal", "readers", "--force", dir}} {
		code, _, errOut := cli(t, args...)
		if code != exitUsage || !strings.Contains(errOut, "--help") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

func TestJournalStatusOfADirectoryWithAReaderAndNoSegmentSaysSo(t *testing.T) {
	dir := t.TempDir()
	if err := journal.SetReader(dir, "early", 0); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli(t, "journal", "status", dir)
	if code != exitOK || errOut != "" || !strings.Contains(out, "segments: none yet") || !strings.Contains(out, "early at byte 0") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, errOut := cli(t, "journal", "trim", dir); code != exitOK || !strings.Contains(out, "deleted 0 segments") {
		t.Fatalf("trim: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestJournalAcceptMissingLetsTheEngineStartOnAJournalWhoseFirstSegmentsWereDeletedByHand(t *testing.T) {
	dir, bases := segmentedJournal(t)
	for _, b := range bases[:2] {
		os.Remove(filepath.Join(dir, fmt.Sprintf("%020d.jsonl", b)))
		os.Remove(filepath.Join(dir, fmt.Sprintf("%020d.idx", b)))
	}
	if j, err := journal.Open(dir); err == nil {
		j.Close()
		t.Fatal("a journal whose first segments were deleted by hand opened")
	}
	code, out, errOut := cli(t, "journal", "accept-missing", dir)
	if code != exitOK || errOut != "" || !strings.Contains(out, fmt.Sprintf("accepted bytes 0 to %d as gone", bases[2]-1)) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	j, err := journal.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
}
