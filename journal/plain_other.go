// SPDX-License-Identifier: Apache-2.0

//go:build !amd64 || purego

package journal

import (
	"encoding/binary"
	"math/bits"
)

// plainLen returns the length of the longest prefix of b that holds no quote, no backslash, no
// control byte and no byte of 0x80 or above: the bytes a JSON string body can take as they are.
func plainLen(b []byte) int {
	const (
		lo8 = 0x0101010101010101
		hi8 = 0x8080808080808080
	)
	i := 0
	// Eight bytes at a time. The mask's false positives (borrows) sit only above a true match, so its
	// lowest set bit is the first byte that needs a look.
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ (lo8 * '"')
		bs := x ^ (lo8 * '\\')
		if m := ((x-lo8*0x20)&^x | (q-lo8)&^q | (bs-lo8)&^bs | x) & hi8; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
			return i
		}
	}
	return i
}
