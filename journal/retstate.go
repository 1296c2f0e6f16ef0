// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/outbox"
)

const (
	// stateName is the journal's own record, beside its segments: where the last segment began when
	// the journal last rolled to it, and what retention deleted. It is the only file in the directory
	// that tells a segment retention deleted from one deleted by hand.
	stateName    = "retention.state"
	stateTmpName = stateName + ".tmp"
	stateMagic   = "outbox journal retention 1"
	// The record keeps the runs of the most recently deleted segments, at most this many and with
	// ids of at most maxStateIDBytes in all, so that it stays a small file whatever the history.
	maxStateRuns    = 1000
	maxStateIDBytes = 64 << 10
	// faultStateTmp: the record is written and synced under its temporary name, not renamed.
	faultStateTmp = "journal.state_tmp"
)

// DeletedRun is a run some of whose lines retention deleted, with the last seq of the run it
// deleted: a reader that had not applied the run up to that seq will not get those lines.
type DeletedRun struct {
	RunID   string
	LastSeq int64
}

// retState is what the record holds.
type retState struct {
	tail    int64 // the last segment's position when the journal last rolled to it
	deleted int64 // retention deleted, or decided to delete, every segment before this position
	// Totals of what retention deleted, and of that, how many segments under the cap.
	segments, bytes, capped int64
	runs                    []DeletedRun // oldest deletion first, one entry per run
	dropped                 int64        // runs dropped from runs to keep the record small
}

func (s *retState) encode() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\ntail %d\ndeleted %d\ntotals %d %d %d\ndropped %d\n", stateMagic, s.tail, s.deleted,
		s.segments, s.bytes, s.capped, s.dropped)
	for _, r := range s.runs {
		fmt.Fprintf(&b, "run %s %d\n", strconv.Quote(r.RunID), r.LastSeq)
	}
	body := b.String()
	return fmt.Appendf([]byte(body), "crc %08x\n", crc32.Checksum([]byte(body), readerCRC))
}

func parseState(b []byte) (*retState, error) {
	text := string(b)
	i := strings.LastIndex(text, "crc ")
	if i < 0 || !strings.HasSuffix(text, "\n") || (i > 0 && text[i-1] != '\n') {
		return nil, errors.New("no checksum")
	}
	body := text[:i]
	sum, err := strconv.ParseUint(strings.TrimSuffix(text[i+4:], "\n"), 16, 32)
	if err != nil || uint32(sum) != crc32.Checksum([]byte(body), readerCRC) {
		return nil, errors.New("its checksum does not match")
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	s := &retState{}
	if len(lines) < 5 || lines[0] != stateMagic {
		return nil, errors.New("no header")
	}
	if _, err := fmt.Sscanf(strings.Join(lines[1:5], "\n"),
		"tail %d\ndeleted %d\ntotals %d %d %d\ndropped %d", &s.tail, &s.deleted, &s.segments, &s.bytes, &s.capped, &s.dropped); err != nil {
		return nil, fmt.Errorf("its header does not parse: %v", err)
	}
	if s.tail < 0 || s.deleted < 0 || s.deleted > s.tail || s.segments < 0 || s.bytes < 0 || s.capped < 0 || s.capped > s.segments || s.dropped < 0 {
		return nil, errors.New("its figures are impossible")
	}
	seen := map[string]bool{}
	for _, l := range lines[5:] {
		rest, ok := strings.CutPrefix(l, "run ")
		j := strings.LastIndexByte(rest, ' ')
		if !ok || j < 0 {
			return nil, fmt.Errorf("line %q does not parse", l)
		}
		id, err1 := strconv.Unquote(rest[:j])
		seq, err2 := strconv.ParseInt(rest[j+1:], 10, 64)
		if err1 != nil || err2 != nil || seq < 1 || seen[id] {
			return nil, fmt.Errorf("line %q does not parse", l)
		}
		seen[id] = true
		s.runs = append(s.runs, DeletedRun{RunID: id, LastSeq: seq})
	}
	return s, nil
}

// readState reads dir's record; ok is false when it has none.
func readState(dir string) (s *retState, ok bool, err error) {
	path := filepath.Join(dir, stateName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &retState{}, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("journal: %w", err)
	}
	s, err = parseState(b)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %s is not the journal's retention record (%v); it is written whole or not at all, so another program changed it",
			ErrModified, path, err)
	}
	return s, true, nil
}

// write replaces dir's record: to a temporary name, synced, renamed, and the directory synced.
func (s *retState) write(dir string) error {
	tmp := filepath.Join(dir, stateTmpName)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("journal: write %s: %w", stateName, err)
	}
	_, err = f.Write(s.encode())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		faultpoint.Hit(faultStateTmp)
		err = os.Rename(tmp, filepath.Join(dir, stateName))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: write %s: %w", stateName, err)
	}
	return syncDir(dir)
}

// noteDeleted records that the runs of a segment's index lost their lines up to their last seq in
// it, keeping the record within its bounds by forgetting the runs deleted longest ago.
func (s *retState) noteDeleted(si *segIndex) {
	lasts := make(map[string]int64, len(si.runs))
	for _, r := range si.runs {
		lasts[r.id] = r.spans[len(r.spans)-1].last()
	}
	kept := s.runs[:0]
	for _, old := range s.runs {
		if last, ok := lasts[old.RunID]; ok {
			lasts[old.RunID] = max(last, old.LastSeq)
			continue
		}
		kept = append(kept, old)
	}
	s.runs = kept
	for _, r := range si.runs {
		s.runs = append(s.runs, DeletedRun{RunID: r.id, LastSeq: lasts[r.id]})
	}
	size := 0
	for _, r := range s.runs {
		size += len(r.RunID)
	}
	drop := 0
	for len(s.runs)-drop > maxStateRuns || size > maxStateIDBytes {
		size -= len(s.runs[drop].RunID)
		drop++
	}
	if drop > 0 {
		s.runs = append([]DeletedRun(nil), s.runs[drop:]...)
		s.dropped += int64(drop)
	}
}

func (s *retState) clone() *retState {
	c := *s
	c.runs = append([]DeletedRun(nil), s.runs...)
	return &c
}

// checkEnds checks the directory's first and last segments against its record: segments missing at
// the front that retention did not delete, or a last segment missing, were deleted by another
// program, and appending on would hide it.
func checkEnds(dir string, bases []int64, st *retState, found bool) error {
	first, last := bases[0], bases[len(bases)-1]
	switch {
	case first > 0 && (!found || first > st.deleted):
		return fmt.Errorf("%w: %s: the first segment is %s, and retention deleted only what came before byte %d: "+
			"the segments between were deleted by another program; it was not opened (AcceptMissing, or outbox journal accept-missing, accepts the loss): %w",
			ErrModified, dir, segmentName(first), st.deleted, outbox.ErrSinkRefused)
	case found && first < st.deleted && !slices.Contains(bases, st.deleted):
		return fmt.Errorf("%w: %s: its retention record says retention deleted what came before byte %d, where no segment begins; it was not opened (AcceptMissing, or outbox journal accept-missing, accepts the directory as it is): %w",
			ErrModified, dir, st.deleted, outbox.ErrSinkRefused)
	case found && last < st.tail:
		return fmt.Errorf("%w: %s: the journal's last segment %s is missing (the directory's last is %s): "+
			"it was deleted by another program; it was not opened (AcceptMissing, or outbox journal accept-missing, accepts the loss): %w",
			ErrModified, dir, segmentName(st.tail), segmentName(last), outbox.ErrSinkRefused)
	}
	return nil
}

// Missing is what AcceptMissing accepted as gone: the journal-wide bytes [From, To) at the
// front and at the end of the journal (empty ranges when nothing was missing there).
type Missing struct {
	FrontFrom, FrontTo int64
	TailFrom, TailTo   int64
}

// AcceptMissing makes the journal in dir open again after another program deleted segments at its
// front, or its last segments, which Open refuses (ErrModified), or broke its retention record:
// under the directory's lock (ErrLocked while a Journal has it open), it records the directory's
// first segment as where retention's deletes end and its last segment as the one appended to, and
// returns what it accepted as gone. Nothing says which runs' lines went with them: a reader that
// had not read them is told it lost lines (its position is below the first segment), and one whose
// position was in a lost last segment is past the journal's end. A backup that keeps
// retention.state with the segments needs none of this.
func AcceptMissing(dir string) (Missing, error) {
	var m Missing
	segs, err := listSegments(dir)
	if err != nil {
		return m, err
	}
	if len(segs) == 0 {
		return m, fmt.Errorf("journal: %s holds no segment; nothing to accept", dir)
	}
	dirf, err := os.Open(dir)
	if err != nil {
		return m, fmt.Errorf("journal: %w", err)
	}
	if err := lock(dirf); err != nil {
		dirf.Close()
		if errors.Is(err, errHeld) {
			return m, fmt.Errorf("%w: %s", ErrLocked, dir)
		}
		return m, fmt.Errorf("journal: lock %s: %w", dir, err)
	}
	defer unlock(dirf)
	// Read again under the lock: a Journal that had it may have rolled.
	if segs, err = listSegments(dir); err != nil {
		return m, err
	}
	st, _, err := readState(dir)
	if err != nil {
		st = &retState{} // a record another program broke is replaced
	}
	bases := make([]int64, len(segs))
	for i, s := range segs {
		bases[i] = s.base
	}
	first, last := bases[0], bases[len(bases)-1]
	ns := st.clone()
	if first > st.deleted {
		m.FrontFrom, m.FrontTo = st.deleted, first
	}
	if first > st.deleted || !slices.Contains(bases, st.deleted) {
		ns.deleted = first
	}
	if last < st.tail {
		m.TailFrom, m.TailTo = last, st.tail
	}
	ns.tail = last
	return m, ns.write(dir)
}
