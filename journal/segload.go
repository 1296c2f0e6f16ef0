// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/outbox"
)

// loadIndexes loads the sealed segments' indexes and reads the last segment, from where an interrupted
// call stopped.
func (j *Journal) loadIndexes(ctx context.Context) error {
	if j.merged {
		return nil
	}
	if j.loaded == 0 && len(j.sealed) > 0 && j.sealed[0].si == nil {
		if err := j.readSummary(); err != nil {
			return err
		}
	}
	for j.loaded < len(j.sealed) {
		if err := j.interrupted(ctx); err != nil {
			return err
		}
		seg := &j.sealed[j.loaded]
		if seg.si == nil {
			si, err := j.segmentIndex(ctx, *seg)
			if err != nil {
				return err
			}
			seg.si = si
			j.unsummarized++
		}
		seg.si.mergeInto(&j.runs)
		j.loaded++
	}
	if err := j.scanInto(ctx, &j.tailRuns, j.tailBase+j.size); err != nil {
		return err
	}
	for id, rs := range j.tailRuns.runs {
		j.runs.addSpans(id, rs.spans, 0)
	}
	// A run whose first lines retention deleted keeps its last seq, and its re-deliveries of those
	// lines cannot be compared.
	for _, r := range j.st.runs {
		rs := j.runs.runs[r.RunID]
		if rs == nil {
			rs = &runSpans{}
			j.runs.runs[r.RunID] = rs
		}
		rs.gone = max(rs.gone, r.LastSeq)
		rs.top = max(rs.top, r.LastSeq)
	}
	for _, rs := range j.runs.runs {
		if rs.unsorted {
			rs.sort()
		}
	}
	j.runs.built, j.merged = true, true
	if j.unsummarized >= j.sumEvery {
		// The start read that many index files: the next one need not.
		j.writeSummary()
	}
	if j.checkpointDue() {
		// The segment was read whole (no checkpoint, or one not trusted): the next start need not.
		j.checkpoint()
	}
	return nil
}

// segmentIndex reads a sealed segment's index, and trusts it only when it is the index of that
// segment as it is now: its position, size and modification time, and the digest of its last line,
// read alone. Any
// other index (missing, torn, failing its checksum, another segment's, a stale one) is rebuilt from
// the segment and written again.
func (j *Journal) segmentIndex(ctx context.Context, seg segment) (*segIndex, error) {
	st, err := os.Stat(filepath.Join(j.dir, segmentName(seg.base)))
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(j.dir, indexName(seg.base)))
	if err == nil {
		if si, perr := parseSegIndex(b); perr == nil && si.base == seg.base && si.size == seg.size &&
			si.mtime == st.ModTime().UnixNano() {
			sum, ok, err := j.lineSum(seg.base+si.lastStart, seg.base+seg.size)
			if err != nil {
				return nil, err
			}
			if ok && sum == si.lastSum {
				return si, nil
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("journal: %w", err)
	}
	return j.rebuildIndex(ctx, seg)
}

// lineSum returns the digest of the bytes from start to end, the last line of what ends at end
// (its newline included); ok is false when they do not end in a newline, which no line the
// journal wrote does.
func (j *Journal) lineSum(start, end int64) (sum [sha256.Size]byte, ok bool, err error) {
	b := make([]byte, end-start)
	if err := j.readAt(b, start); err != nil {
		return sum, false, err
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		return sum, false, nil
	}
	return sha256.Sum256(b), true, nil
}

// rebuildIndex reads a sealed segment whole to index it, and writes its index file.
func (j *Journal) rebuildIndex(ctx context.Context, seg segment) (*segIndex, error) {
	path := filepath.Join(j.dir, segmentName(seg.base))
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	end, err := inspect(f)
	var st os.FileInfo
	if err == nil {
		st, err = f.Stat()
	}
	f.Close()
	if err != nil {
		return nil, inspectError(path, err)
	}
	if end.complete != seg.size {
		return nil, fmt.Errorf("%w: sealed segment %s does not end with a complete line: %w", ErrModified, path, outbox.ErrSinkRefused)
	}
	var x runIndex
	x.init(seg.size)
	x.scanned = seg.base
	if err := j.scanInto(ctx, &x, seg.base+seg.size); err != nil {
		return nil, err
	}
	sum, _, err := j.lineSum(seg.base+end.lastStart, seg.base+seg.size)
	if err != nil {
		return nil, err
	}
	si := segIndexOf(&x, seg.base, seg.size, st.ModTime().UnixNano(), seg.base+end.lastStart, sum)
	if err := j.writeIndex(si); err != nil {
		return nil, err
	}
	return si, nil
}

// writeIndex writes a segment's index durably: to a temporary name, synced, renamed, and the
// directory synced, so that the name holds the whole index or none.
func (j *Journal) writeIndex(si *segIndex) error {
	final := filepath.Join(j.dir, indexName(si.base))
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("journal: write the index of %s: %w", segmentName(si.base), err)
	}
	_, err = f.Write(si.encode())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		if si.checkpoint {
			faultpoint.Hit(faultCheckpointTmp)
		} else {
			faultpoint.Hit(faultIndexTmp)
		}
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("journal: write the index of %s: %w", segmentName(si.base), err)
	}
	return syncDir(j.dir)
}
