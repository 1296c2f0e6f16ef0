// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// The seal summary: the sealed segments' indexes in one file, so that a start reads one file where
// it would read an index file per segment (thousands after a year). It is an aid, never a record the
// journal needs: every sealed segment keeps its own index, and a start reads that index for each
// segment the summary does not cover or covers with a record it does not trust.
const (
	summaryName    = "seals.summary"
	summaryTmpName = summaryName + ".tmp"
	summaryMagic   = "outbox journal seal summary 1\n"
	// summaryEvery is how many sealed segments may be left out of the summary (sealed since it was
	// written, or read one by one at a start) before it is written again: what a start reads of
	// index files at most, and what a seal pays for rewriting the summary, once every so many seals.
	summaryEvery = 64
)

// The fault points of a summary's write, in the order it passes them.
const (
	faultBeforeSummary = "journal.before_summary" // a summary is due; nothing of it is written
	faultSummaryTmp    = "journal.summary_tmp"    // the summary is written and synced under its temporary name
	faultAfterSummary  = "journal.after_summary"  // the summary is renamed into place and the directory synced
)

// withSummaryEvery sets how many sealed segments may be left out of the summary, for tests.
func withSummaryEvery(n int) Option { return func(o *options) { o.summaryEvery = n } }

// summaryRecord is a sealed segment's index as the summary holds it, with the inode number of the
// segment file it was written for.
type summaryRecord struct {
	ino uint64
	si  *segIndex
}

// encodeSummary renders the sealed segments' indexes (each as its index file holds it, with its
// own checksum), each after its segment file's inode number, and a checksum of the whole.
func encodeSummary(segs []segment) []byte {
	b := []byte(summaryMagic)
	n := 0
	for _, s := range segs {
		if s.si != nil && s.ino != 0 {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, s := range segs {
		if s.si == nil || s.ino == 0 {
			continue
		}
		idx := s.si.encode()
		b = binary.AppendUvarint(b, s.ino)
		b = binary.AppendUvarint(b, uint64(len(idx)))
		b = append(b, idx...)
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// parseSummary reads a summary, checking its checksum and each index it holds as parseSegIndex does.
func parseSummary(b []byte) (map[int64]summaryRecord, error) {
	if len(b) < len(summaryMagic)+sha256.Size || !bytes.HasPrefix(b, []byte(summaryMagic)) {
		return nil, fmt.Errorf("%w: a summary too short or without its header", errBadIndex)
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if s := sha256.Sum256(body); !bytes.Equal(s[:], sum) {
		return nil, fmt.Errorf("%w: the summary's checksum does not match", errBadIndex)
	}
	d := decoder{b: body[len(summaryMagic):]}
	n := d.count()
	out := make(map[int64]summaryRecord, n)
	for i := 0; i < n && d.err == nil; i++ {
		ino := d.uint()
		idx := d.bytes(d.count())
		if d.err != nil {
			break
		}
		si, err := parseSegIndex(idx)
		if err != nil {
			return nil, err
		}
		if _, dup := out[si.base]; dup {
			d.fail("two records of segment %d", si.base)
		}
		out[si.base] = summaryRecord{ino: ino, si: si}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the records", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

// readSummary gives each sealed segment whose index is not loaded yet the summary's record of it,
// when the record is to be trusted: the summary's checksum holds, and the segment file is the one
// the record was written for, as Open found it: the same position, size, modification time and
// inode (a copy of the directory is other files, whose own indexes are then read). A sealed segment
// is never written again, so a record true when it was written stays true while its file is the
// same. A summary that is torn, fails its checksum or is not one is ignored.
func (j *Journal) readSummary() error {
	b, err := os.ReadFile(filepath.Join(j.dir, summaryName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	recs, err := parseSummary(b)
	if err != nil {
		return nil
	}
	for i := j.loaded; i < len(j.sealed); i++ {
		s := &j.sealed[i]
		r, ok := recs[s.base]
		if s.si == nil && ok && s.ino != 0 && r.ino == s.ino && r.si.size == s.size && r.si.mtime == s.mtime {
			s.si = r.si
		}
	}
	return nil
}

// writeSummary writes the sealed segments' indexes as the summary, durably (a temporary name,
// synced, renamed, the directory synced), so that the name holds a whole summary or none. Like a
// checkpoint it is an aid: a failure leaves the last summary (whose records of segments still there
// are still true) or none, and fails nothing. The next try comes summaryEvery seals later.
func (j *Journal) writeSummary() {
	j.unsummarized = 0
	faultpoint.Hit(faultBeforeSummary)
	final := filepath.Join(j.dir, summaryName)
	tmp := filepath.Join(j.dir, summaryTmpName)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return
	}
	_, err = f.Write(encodeSummary(j.sealed))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		faultpoint.Hit(faultSummaryTmp)
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return
	}
	if syncDir(j.dir) == nil {
		faultpoint.Hit(faultAfterSummary)
	}
}
