// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
)

// FilePosition is where a file source stands in a journal file, as ApplyFile and FollowFile store it
// in the inbox's database with the effects of the lines before it.
//
// The offset alone is never trusted: the file at Path (or the file the path names now) is the one
// the position was taken in only if it has the same Device and Inode, begins with the bytes the
// Fingerprint was taken of, and holds at Offset the end of a line whose SHA-256 is LastLine. A
// source resuming inside a file also proves, once per start, that the file still holds everything
// it read before Offset: the SHA-256 of the file's first Offset bytes must be Prefix.
type FilePosition struct {
	Path   string // the absolute name the file was opened under when it was last read; a rotation may have renamed it since: Device and Inode say which file it is
	Device uint64 // the file's device and inode (0 where the system has none)
	Inode  uint64
	Offset int64 // bytes consumed: every complete line before Offset was given to the inbox

	FingerprintLen int               // how many of the file's first bytes Fingerprint covers: its first line, up to 4096
	Fingerprint    [sha256.Size]byte // SHA-256 of them: which journal this is, whatever its inode
	LastLineLen    int               // the length of the line that ends at Offset, without its newline
	LastLine       [sha256.Size]byte // its SHA-256; zero when Offset is 0
	// Prefix is the SHA-256 of the file's first Offset bytes, everything read before the position;
	// zero when Offset is 0, and in a position of the first encoding, which lacks it: such a
	// position proves nothing of what came before its last line, and its file is read again from
	// its start.
	Prefix [sha256.Size]byte
}

// proven reports whether p carries the digest of everything before its offset (or needs none).
func (p FilePosition) proven() bool {
	return p.Offset == 0 || p.Prefix != [sha256.Size]byte{}
}

// fingerprintSize is the most of a file's first line that identifies it. The first line of a journal
// holds its run's id and a timestamp in nanoseconds, so two journals differ well within it, and a
// copy of a journal edited further on (or grown) is still known as that journal.
const fingerprintSize = 4096

// The first byte of an encoded position. Version 1 has no Prefix; a source stores version 2 only,
// and reads either.
const (
	filePositionV1      = 1
	filePositionVersion = 2
)

// errBadPosition is why ParseFilePosition refuses an encoding.
var errBadPosition = errors.New("inbox: not a file source position")

// encode renders p: a version byte, then the numbers as uvarints, the digests, and the path. A
// position that lacks the digest of its prefix (decoded from the first version) is rendered in the
// first version, as it was stored.
func (p FilePosition) encode() []byte {
	if !p.proven() {
		return p.encodeVersion(filePositionV1)
	}
	return p.encodeVersion(filePositionVersion)
}

func (p FilePosition) encodeVersion(v byte) []byte {
	b := make([]byte, 0, 1+5*binary.MaxVarintLen64+3*sha256.Size+len(p.Path))
	b = append(b, v)
	b = binary.AppendUvarint(b, p.Device)
	b = binary.AppendUvarint(b, p.Inode)
	b = binary.AppendUvarint(b, uint64(p.Offset))
	b = binary.AppendUvarint(b, uint64(p.FingerprintLen))
	b = append(b, p.Fingerprint[:]...)
	b = binary.AppendUvarint(b, uint64(p.LastLineLen))
	b = append(b, p.LastLine[:]...)
	if v != filePositionV1 {
		b = append(b, p.Prefix[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(p.Path)))
	return append(b, p.Path...)
}

// ParseFilePosition decodes a position that ApplyFile or FollowFile stored (Source.Position of a
// source named "file:" followed by an absolute path), in either encoding: the first, without Prefix,
// which an earlier release stored, or the current one. It refuses, with an error, anything that is
// not exactly such an encoding: another version, a truncated or longer input, numbers out of range,
// a position whose parts contradict each other (a last line longer than the offset, a prefix digest
// at offset 0 or none after it), or a path that is not absolute or holds a NUL byte.
func ParseFilePosition(pos []byte) (FilePosition, error) {
	var p FilePosition
	if len(pos) == 0 {
		return p, fmt.Errorf("%w: empty", errBadPosition)
	}
	v := pos[0]
	if v != filePositionV1 && v != filePositionVersion {
		return p, fmt.Errorf("%w: version %d, not %d or %d", errBadPosition, v, filePositionV1, filePositionVersion)
	}
	r := posReader{b: pos[1:]}
	p.Device = r.uvarint("device")
	p.Inode = r.uvarint("inode")
	off := r.uvarint("offset")
	fpLen := r.uvarint("fingerprint length")
	r.digest(&p.Fingerprint, "fingerprint")
	lastLen := r.uvarint("last line length")
	r.digest(&p.LastLine, "last line digest")
	if v != filePositionV1 {
		r.digest(&p.Prefix, "prefix digest")
	}
	pathLen := r.uvarint("path length")
	if r.err != nil {
		return FilePosition{}, r.err
	}
	zero := [sha256.Size]byte{}
	switch {
	case off > math.MaxInt64:
		return FilePosition{}, fmt.Errorf("%w: offset %d out of range", errBadPosition, off)
	case fpLen > uint64(min(off, fingerprintSize)) || (off > 0) != (fpLen > 0):
		return FilePosition{}, fmt.Errorf("%w: a fingerprint of %d bytes at offset %d", errBadPosition, fpLen, off)
	case off == 0 && (lastLen != 0 || p.LastLine != zero):
		return FilePosition{}, fmt.Errorf("%w: a last line at offset 0", errBadPosition)
	case off > 0 && lastLen >= off:
		return FilePosition{}, fmt.Errorf("%w: a last line of %d bytes and its newline before offset %d", errBadPosition, lastLen, off)
	case v != filePositionV1 && (off == 0) != (p.Prefix == zero):
		return FilePosition{}, fmt.Errorf("%w: a prefix digest that does not fit offset %d", errBadPosition, off)
	case pathLen != uint64(len(r.b)):
		return FilePosition{}, fmt.Errorf("%w: a path of %d bytes where %d remain", errBadPosition, pathLen, len(r.b))
	}
	p.Offset, p.FingerprintLen, p.LastLineLen = int64(off), int(fpLen), int(lastLen)
	p.Path = string(r.b)
	if err := checkPositionPath(p.Path); err != nil {
		return FilePosition{}, err
	}
	if !bytes.Equal(p.encodeVersion(v), pos) {
		// A number encoded with more bytes than it needs: one position, one encoding.
		return FilePosition{}, fmt.Errorf("%w: not in its canonical encoding", errBadPosition)
	}
	return p, nil
}

func checkPositionPath(path string) error {
	switch {
	case !filepath.IsAbs(path):
		return fmt.Errorf("%w: the path %q is not absolute", errBadPosition, path)
	case strings.IndexByte(path, 0) >= 0:
		return fmt.Errorf("%w: the path %q holds a NUL byte", errBadPosition, path)
	case filepath.Clean(path) != path:
		return fmt.Errorf("%w: the path %q is not clean", errBadPosition, path)
	}
	return nil
}

type posReader struct {
	b   []byte
	err error
}

func (r *posReader) uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = fmt.Errorf("%w: no %s", errBadPosition, what)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *posReader) digest(d *[sha256.Size]byte, what string) {
	if r.err != nil {
		return
	}
	if len(r.b) < sha256.Size {
		r.err = fmt.Errorf("%w: no %s", errBadPosition, what)
		return
	}
	copy(d[:], r.b)
	r.b = r.b[sha256.Size:]
}

// String is the position for a person: where, how far, which file.
func (p FilePosition) String() string {
	return fmt.Sprintf("%s at byte %d (device %d, inode %d)", quotePath(p.Path), p.Offset, p.Device, p.Inode)
}
