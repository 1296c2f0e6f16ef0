// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// loadCheckpoint reads the checkpoint beside the last segment and trusts it only when it is a
// checkpoint of that segment's file as it is now: its checksum holds, it names the segment's
// position and file (its inode: a copy of the directory is other files), it covers no more than the
// segment's complete lines, and the line it says its part ends with, read alone, has the digest it
// records. Then the first read of the last segment starts where it ends. Any other (torn, another
// segment's or journal's, a copy's, or one whose part a crash or a program cut back and rewrote)
// is not trusted: ok is false, and the segment is read whole.
func (j *Journal) loadCheckpoint() (ok bool, err error) {
	ck, err := readCheckpoint(j.dir, j.tailBase, j.f, j.size)
	if ck == nil || err != nil {
		return false, err
	}
	ck.mergeInto(&j.tailRuns)
	j.tailRuns.scanned = ck.base + ck.size
	j.ckptEnd = ck.base + ck.size
	return true, nil
}

// readCheckpoint returns the checkpoint beside the segment at base in dir, open as f with size bytes
// of complete lines, when it is to be trusted by loadCheckpoint's rules, or nil. A reader of the
// journal that reads its last segment can start after it too.
func readCheckpoint(dir string, base int64, f *os.File, size int64) (*segIndex, error) {
	b, err := os.ReadFile(filepath.Join(dir, indexName(base)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	ck, err := parseCheckpoint(b)
	if err != nil || ck.base != base || ck.size > size {
		return nil, nil
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if id := fileID(st); id == 0 || id != ck.ino {
		return nil, nil
	}
	line := make([]byte, ck.size-ck.lastStart)
	if err := readAt(f, line, ck.lastStart); err != nil {
		return nil, fmt.Errorf("journal: read %s at byte %d: %w", f.Name(), ck.lastStart, err)
	}
	if line[len(line)-1] != '\n' || sha256.Sum256(line) != ck.lastSum {
		return nil, nil
	}
	return ck, nil
}

// checkpoint writes the last segment's index as it is now beside it (as its .idx, which sealing
// replaces by the seal index), so that the next start reads only the lines after it. It is an aid,
// never a record the journal needs: a failure leaves the last checkpoint (still a true account of a
// shorter part) or none, and does not fail the append whose batch is already durable. The next try
// comes a checkpoint's interval later, not at the next append.
func (j *Journal) checkpoint() {
	end := j.tailBase + j.size
	j.ckptEnd = end
	if j.size == 0 || !j.tailRuns.built {
		return
	}
	faultpoint.Hit(faultBeforeCheckpoint)
	sum, ok, err := j.lineSum(j.lastLine, end)
	if err != nil || !ok {
		return
	}
	st, err := j.f.Stat()
	if err != nil || fileID(st) == 0 {
		return
	}
	si := segIndexOf(&j.tailRuns, j.tailBase, j.size, 0, j.lastLine, sum)
	si.checkpoint, si.ino = true, fileID(st)
	if j.writeIndex(si) == nil {
		faultpoint.Hit(faultAfterCheckpoint)
	}
}

// checkpointDue tells whether the last segment has grown a checkpoint's interval past its last one.
func (j *Journal) checkpointDue() bool {
	return j.ckptEvery > 0 && j.tailBase+j.size-j.ckptEnd >= j.ckptEvery
}
