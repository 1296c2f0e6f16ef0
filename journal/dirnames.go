// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// checkJournalNames refuses, as Open does, a directory holding a file no journal keeps: what reports
// on a journal must not report a mistyped path as a journal with no segments yet.
func checkJournalNames(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	for _, e := range ents {
		if !isJournalName(e) {
			return fmt.Errorf("%w: %s holds %q, which is not a file of a journal", ErrNotJournal, dir, e.Name())
		}
	}
	return nil
}

// isJournalName says whether Open takes e as one of a journal's files (see Journal.open).
func isJournalName(e os.DirEntry) bool {
	name := e.Name()
	if _, ok := parseBase(name, segmentExt); ok {
		return true // Open says on its own what is wrong with one that is not a regular file
	}
	if !e.Type().IsRegular() {
		return false
	}
	for _, ext := range []string{indexExt, tmpExt} {
		if _, ok := parseBase(name, ext); ok {
			return true
		}
	}
	_, reader := parseReaderFileName(name)
	return reader || parseReaderTmpName(name) || name == stateName || name == stateTmpName ||
		name == summaryName || name == summaryTmpName
}

// listSegments reads dir's segments in order, without its lock, checking that each sealed one ends
// where the next begins.
func listSegments(dir string) ([]segment, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNotJournal, dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	var segs []segment
	for _, e := range ents {
		if base, ok := parseBase(e.Name(), segmentExt); ok {
			segs = append(segs, segment{base: base})
		}
	}
	slices.SortFunc(segs, func(a, b segment) int { return int(min(max(a.base-b.base, -1), 1)) })
	for i := range segs {
		st, err := os.Stat(filepath.Join(dir, segmentName(segs[i].base)))
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		segs[i].size = st.Size()
		if i > 0 && segs[i-1].base+segs[i-1].size != segs[i].base {
			return nil, fmt.Errorf("%w: %s: sealed segment %s is %d bytes, and the next segment's name says %d",
				ErrModified, dir, segmentName(segs[i-1].base), segs[i-1].size, segs[i].base-segs[i-1].base)
		}
	}
	return segs, nil
}
