// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"crypto/sha256"
	"math"
	"testing"
)

func samplePositions() []FilePosition {
	return []FilePosition{
		{Path: "/j/journal.jsonl"},
		{Path: "/j/journal.jsonl", Device: 2049, Inode: 1 << 40, Offset: 31, FingerprintLen: 31,
			Fingerprint: sha256.Sum256([]byte("x")), LastLineLen: 30, LastLine: sha256.Sum256([]byte("y")),
			Prefix: sha256.Sum256([]byte("z"))},
		{Path: "/j/journal.jsonl.1", Device: math.MaxUint64, Inode: math.MaxUint64, Offset: math.MaxInt64,
			FingerprintLen: fingerprintSize, LastLineLen: 1 << 20},
		{Path: "/ünï/\x01\xff", Offset: 1, FingerprintLen: 1, Prefix: sha256.Sum256([]byte("\n"))},
		// The first encoding, which an earlier release stored: no prefix digest.
		{Path: "/j/journal.jsonl", Device: 2049, Inode: 7, Offset: 31, FingerprintLen: 31,
			Fingerprint: sha256.Sum256([]byte("x")), LastLineLen: 30, LastLine: sha256.Sum256([]byte("y"))},
	}
}

// What a source stores decodes to what it was, and the command line reads it with ParseFilePosition.
func TestParseFilePositionDecodesWhatTheSourceStores(t *testing.T) {
	for _, p := range samplePositions() {
		got, err := ParseFilePosition(p.encode())
		if err != nil || got != p {
			t.Errorf("ParseFilePosition(encode(%+v)) = %+v, %v", p, got, err)
		}
	}
}

// Anything else is refused: every cut of a good encoding, every byte more, another version, numbers
// that contradict each other, a path that is not absolute and clean.
func TestParseFilePositionRefusesWhatIsNotAPosition(t *testing.T) {
	good := samplePositions()[1].encode()
	for i := range good {
		if _, err := ParseFilePosition(good[:i]); err == nil {
			t.Errorf("the first %d bytes were taken", i)
		}
	}
	if _, err := ParseFilePosition(append(good, 'x')); err == nil {
		t.Error("a byte more was taken")
	}
	bad := []FilePosition{
		{Path: "j/journal.jsonl"},
		{Path: "/j/../journal.jsonl"},
		{Path: "/j/jour\x00nal"},
		{Path: "/j", Offset: 10, FingerprintLen: 11},
		{Path: "/j", Offset: 10000, FingerprintLen: fingerprintSize + 1},
		{Path: "/j", Offset: 10},
		{Path: "/j", Offset: 10, FingerprintLen: 10, LastLineLen: 10},
		{Path: "/j", LastLineLen: 1},
		{Path: "/j", LastLine: sha256.Sum256(nil)},
		{Path: "/j", Offset: -1},
		{Path: "/j", Prefix: sha256.Sum256(nil)},
	}
	for _, p := range bad {
		if got, err := ParseFilePosition(p.encode()); err == nil {
			t.Errorf("%+v was taken as %+v", p, got)
		}
	}
	// The current encoding always holds the digest of what was read before the offset.
	noPrefix := samplePositions()[4].encodeVersion(filePositionVersion)
	if got, err := ParseFilePosition(noPrefix); err == nil {
		t.Errorf("a position of version %d without its prefix digest was taken as %+v", filePositionVersion, got)
	}
	v2 := bytes.Clone(good)
	v2[0] = 3
	if _, err := ParseFilePosition(v2); err == nil {
		t.Error("version 3 was taken")
	}
	// The offset 31 encoded in two bytes instead of one.
	// Version (1 byte), device 2049 (2), inode 1<<40 (6), then the offset.
	long := append(append(bytes.Clone(good[:9]), 0x9f, 0x00), good[10:]...)
	if _, err := ParseFilePosition(long); err == nil || !bytes.Contains([]byte(err.Error()), []byte("canonical")) {
		t.Error("a number in more bytes than it needs was taken")
	}
}

func FuzzParseFilePosition(f *testing.F) {
	for _, p := range samplePositions() {
		f.Add(p.encode())
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseFilePosition(b)
		if err != nil {
			return
		}
		if !bytes.Equal(p.encodeVersion(b[0]), b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, p, p.encodeVersion(b[0]))
		}
		if b[0] == filePositionVersion && !p.proven() {
			t.Fatalf("%x decodes to a position without the digest its version holds: %+v", b, p)
		}
		if q, err := ParseFilePosition(p.encode()); err != nil || q != p {
			t.Fatalf("%+v, stored again, decodes to %+v, %v", p, q, err)
		}
		if p.Offset < 0 || p.FingerprintLen > int(min(p.Offset, fingerprintSize)) || (p.Offset > 0) != (p.FingerprintLen > 0) || (p.Offset > 0 && int64(p.LastLineLen) >= p.Offset) {
			t.Fatalf("%x decodes to a position that contradicts itself: %+v", b, p)
		}
		_ = p.String()
	})
}
