// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/textmachine/outbox/outbox"
)

// readAt reads the journal's bytes at its offsets, from whichever segments hold them.
func (j *Journal) readAt(b []byte, off int64) error {
	for len(b) > 0 {
		if off >= j.tailBase {
			return j.appendFile.readAt(b, off-j.tailBase)
		}
		i := sort.Search(len(j.sealed), func(i int) bool { return j.sealed[i].base+j.sealed[i].size > off })
		if i == len(j.sealed) || j.sealed[i].base > off {
			return fmt.Errorf("journal: %s holds no segment at byte %d", j.dir, off)
		}
		f, err := j.openSealed(i)
		if err != nil {
			return err
		}
		seg := j.sealed[i]
		n := min(int64(len(b)), seg.base+seg.size-off)
		if err := readAt(f, b[:n], off-seg.base); err != nil {
			return fmt.Errorf("journal: read %s at byte %d: %w", f.Name(), off-seg.base, err)
		}
		b, off = b[n:], off+n
	}
	return nil
}

// openSealed opens sealed segment i for reading, or takes the one kept from the last read, and checks
// that the segment still has the size it was sealed at: another program's append to a sealed
// segment is found when the segment is read.
func (j *Journal) openSealed(i int) (*os.File, error) {
	if j.rdIdx != i {
		if j.rd != nil {
			j.rd.Close()
			j.rd, j.rdIdx = nil, -1
		}
		f, err := os.Open(filepath.Join(j.dir, segmentName(j.sealed[i].base)))
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		j.rd, j.rdIdx = f, i
	}
	st, err := j.rd.Stat()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	if seg := j.sealed[i]; st.Size() != seg.size {
		return nil, fmt.Errorf("%w: sealed segment %s is %d bytes, it was sealed at %d: %w",
			ErrModified, j.rd.Name(), st.Size(), seg.size, outbox.ErrSinkRefused)
	}
	return j.rd, nil
}
