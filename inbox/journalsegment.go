// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/textmachine/outbox/journal"
)

// segmentFileName is the name of the segment that begins at base.
func segmentFileName(base int64) string { return fmt.Sprintf("%020d.jsonl", base) }

// listSegments lists the names (positions) of dir's segments, in order, passing over every other
// file (indexes, reader files). A path that is not a directory is journal.ErrNotJournal; no
// directory, or one with no segment, an error wrapping fs.ErrNotExist.
func listSegments(dir string) ([]int64, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory (a single-file journal is read with ApplyFile)", journal.ErrNotJournal, quotePath(dir))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	var bases []int64
	for _, e := range ents {
		if base, ok := parseSegmentName(e.Name()); ok {
			if !e.Type().IsRegular() {
				return nil, fmt.Errorf("%w: %s: %s is not a regular file", journal.ErrNotJournal, quotePath(dir), e.Name())
			}
			bases = append(bases, base)
		}
	}
	if len(bases) == 0 {
		return nil, fmt.Errorf("inbox: journal %s holds no segment: %w", quotePath(dir), fs.ErrNotExist)
	}
	slices.Sort(bases)
	return bases, nil
}

func parseSegmentName(name string) (int64, bool) {
	if len(name) != 20+len(".jsonl") || name[20:] != ".jsonl" {
		return 0, false
	}
	var v int64
	for _, c := range []byte(name[:20]) {
		if c < '0' || c > '9' || v > (1<<63-1-int64(c-'0'))/10 {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// openSegment opens the segment at base for reading with a shared flock. A segment that is gone,
// or that retention holds to remove it, is an error wrapping fs.ErrNotExist.
func (s *journalSource) openSegment(base int64) (*journalFile, error) {
	path := filepath.Join(s.dir, segmentFileName(base))
	jf, err := openJournalFile(path)
	if err != nil {
		return nil, err
	}
	if err := lockShared(jf.f); err != nil {
		jf.close()
		if errors.Is(err, errHeldExclusive) {
			return nil, fmt.Errorf("inbox: segment %s is being removed: %w: %w", quotePath(path), errHeldExclusive, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("inbox: lock %s: %w", quotePath(path), err)
	}
	jf.shared = true
	// Removed between the open and the lock: retention took and gave up its lock meanwhile.
	if st, err := os.Stat(path); err != nil || !jf.sameID(st) {
		jf.close()
		return nil, fmt.Errorf("inbox: segment %s was removed: %w", quotePath(path), fs.ErrNotExist)
	}
	return jf, nil
}

// errHeldExclusive: another holds an exclusive flock on the segment (retention removing it).
var errHeldExclusive = errors.New("inbox: the segment is locked for removal")
