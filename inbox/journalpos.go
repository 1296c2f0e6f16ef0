// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"encoding/binary"
	"fmt"
	"math"
)

// JournalPosition is where a journal source stands in a segmented journal (journal.Open's
// directory), as ApplyJournal and FollowJournal store it with the effects of the lines before it.
//
// Position is one number, the journal-wide byte position of the first byte not applied; it is what
// the source registers with the journal (journal.SetReader). It is never trusted alone: In proves it
// inside the segment whose name is Segment, the segment that held the last line applied (or the one
// at Position, before a line of it is applied), as a file source's position proves itself in a
// file: the SHA-256 of that segment's first line, of the line that ends at Position, and of every
// byte of the segment before Position. A directory whose segment at Segment does not hold them (the
// journal removed and another started in its place, a segment rewritten) is ErrJournalReplaced,
// never read from the middle of another journal's line.
type JournalPosition struct {
	Position int64
	Segment  int64        // the name (journal-wide position) of the segment the proof is in, at most Position
	In       FilePosition // within that segment: In.Offset is Position − Segment
}

// journalPositionVersion is the first byte of an encoded JournalPosition.
const journalPositionVersion = 1

// encode renders p: its version, the segment as a uvarint, then In as a file position is encoded.
func (p JournalPosition) encode() []byte {
	b := []byte{journalPositionVersion}
	b = binary.AppendUvarint(b, uint64(p.Segment))
	return append(b, p.In.encodeVersion(filePositionVersion)...)
}

// ParseJournalPosition decodes a position that ApplyJournal or FollowJournal stored (Source.Position
// of a source named "journal:" followed by an absolute directory). It refuses anything that is not
// exactly such an encoding.
func ParseJournalPosition(pos []byte) (JournalPosition, error) {
	if len(pos) == 0 || pos[0] != journalPositionVersion {
		return JournalPosition{}, fmt.Errorf("%w: not a journal position of version %d", errBadPosition, journalPositionVersion)
	}
	seg, n := binary.Uvarint(pos[1:])
	if n <= 0 || seg > math.MaxInt64 {
		return JournalPosition{}, fmt.Errorf("%w: no segment", errBadPosition)
	}
	rest := pos[1+n:]
	if len(rest) == 0 || rest[0] != filePositionVersion {
		return JournalPosition{}, fmt.Errorf("%w: the position in the segment is not of version %d", errBadPosition, filePositionVersion)
	}
	in, err := ParseFilePosition(rest)
	if err != nil {
		return JournalPosition{}, err
	}
	if int64(seg) > math.MaxInt64-in.Offset {
		return JournalPosition{}, fmt.Errorf("%w: offset %d in segment %d out of range", errBadPosition, in.Offset, seg)
	}
	p := JournalPosition{Position: int64(seg) + in.Offset, Segment: int64(seg), In: in}
	if string(p.encode()) != string(pos) {
		return JournalPosition{}, fmt.Errorf("%w: not in its canonical encoding", errBadPosition)
	}
	return p, nil
}

// String is the position for a person.
func (p JournalPosition) String() string {
	return fmt.Sprintf("byte %d of the journal (%d into segment %d)", p.Position, p.In.Offset, p.Segment)
}
