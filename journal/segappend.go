// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/internal/faultpoint"
	"github.com/textmachine/outbox/outbox"
)

// Append writes lines, each followed by a newline, at the end of the journal, then fdatasyncs, with
// File.Append's guarantees and checks, against the whole retained journal: a re-delivery is compared
// with its copies in whichever segments hold them, and a run's first batch is refused when any
// segment holds a run of that id with other bytes. A batch goes whole into one segment: when it
// would take the last segment past the segment size, that segment is sealed (its index written
// beside it) and the batch begins a new one, unless the last segment is empty. Another program's
// write to the last segment, or a change of its name, is ErrModified, found before each append;
// a sealed segment's is found when the journal is opened or the segment is read.
func (j *Journal) Append(ctx context.Context, runID string, lines []outbox.EventLine) error {
	return appendBatch(ctx, &j.mu, &j.runLog, &j.appendFile, j.loadIndexes, runID, lines, func(buf []byte) error {
		rolled := false
		if j.size > 0 && j.size+int64(len(buf)) > j.segSize {
			if err := j.roll(); err != nil {
				return err
			}
			rolled = true
		}
		off := j.tailBase + j.size
		if err := j.appendSynced(buf); err != nil {
			return err
		}
		j.runs.noteAppended(runID, lines, off)
		j.tailRuns.noteAppended(runID, lines, off)
		j.tailRuns.scanned = j.tailBase + j.size
		j.lastLine = off + int64(len(buf)-len(lines[len(lines)-1].Line)-1)
		if rolled {
			j.trimAfterSeal(ctx)
			if j.unsummarized >= j.sumEvery {
				j.writeSummary()
			}
		}
		if j.checkpointDue() {
			j.checkpoint()
		}
		return nil
	})
}

// LastSeq returns the highest seq of runID's lines in the journal, or 0 when it holds none.
func (j *Journal) LastSeq(runID string) (int64, error) {
	return j.LastSeqContext(context.Background(), runID)
}

// LastSeqContext returns the highest seq of runID's lines in the journal, or 0 when it holds none.
// The first call after Open (or the first Append) reads the sealed segments' indexes (from the seal
// summary where it holds a record it can trust, from their own files for the rest), rebuilding
// one that is missing or does not match its segment from that segment alone, and reads the last
// segment from its checkpoint on (writing a checkpoint when it had to read more than 16 MiB); it stops with ctx's error when ctx is done, or when Close is called, and the next call
// takes it up where it stopped.
func (j *Journal) LastSeqContext(ctx context.Context, runID string) (int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return 0, err
	}
	if err := j.checkUnmodified(); err != nil {
		return 0, err
	}
	if err := j.loadIndexes(ctx); err != nil {
		return 0, err
	}
	return j.runs.last(runID), nil
}

// roll seals the last segment and starts the next, named by the position it begins at: the index
// first, so that a sealed segment nearly always has one (a crash between the two leaves an index
// beside the last segment, which Open removes), then the new segment, synced into the directory.
func (j *Journal) roll() error {
	faultpoint.Hit(faultBeforeIndex)
	end := j.tailBase + j.size
	sum, _, err := j.lineSum(j.lastLine, end)
	if err != nil {
		return err
	}
	st, err := j.f.Stat()
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	si := segIndexOf(&j.tailRuns, j.tailBase, j.size, st.ModTime().UnixNano(), j.lastLine, sum)
	if err := j.writeIndex(si); err != nil {
		return err
	}
	faultpoint.Hit(faultAfterIndex)
	path := filepath.Join(j.dir, segmentName(end))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s: another program created %s: %w", ErrModified, j.dir, segmentName(end), outbox.ErrSinkRefused)
	}
	if err != nil {
		return fmt.Errorf("journal: start segment %s: %w", path, err)
	}
	if err := syncDir(j.dir); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	// The record of where the last segment begins is what tells a last segment deleted by hand from
	// a roll a crash interrupted; written after the segment exists, it never names a missing one.
	ns := j.st.clone()
	ns.tail = end
	if err := ns.write(j.dir); err != nil {
		f.Close()
		os.Remove(path)
		syncDir(j.dir)
		return err
	}
	j.st = ns
	faultpoint.Hit(faultAfterRoll)
	j.f.Close()
	j.sealed = append(j.sealed, segment{base: j.tailBase, size: j.size, mtime: si.mtime, ino: fileID(st), si: si})
	j.loaded = len(j.sealed)
	j.unsummarized++
	j.tailBase, j.path, j.f, j.size, j.tail, j.lastLine = end, path, f, 0, j.tail[:0], end
	j.tailRuns.init(0)
	j.tailRuns.scanned = end
	j.ckptEnd = end
	return nil
}
