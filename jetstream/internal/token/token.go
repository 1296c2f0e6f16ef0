// SPDX-License-Identifier: Apache-2.0

// Package token writes a run id as one NATS subject token, and reads it back.
//
// It is a package of its own, importing only the standard library, so that its fuzz target's test
// binary is small: the fuzzer instruments every package a fuzzed test binary holds, and the sink's
// holds the NATS server its tests embed.
package token

import (
	"strconv"
	"strings"
)

// Encode writes a run id as a single subject token, reversibly: letters, digits, '-' and '_' stay,
// any other byte becomes '~' and two lowercase hex digits.
func Encode(runID string) string {
	var b strings.Builder
	b.Grow(len(runID))
	for i := 0; i < len(runID); i++ {
		c := runID[i]
		if Byte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('~')
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&15])
		}
	}
	return b.String()
}

// Byte reports whether Encode keeps c as itself.
func Byte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// Decode reads a token back into its run id; ok is false when tok is not one Encode makes.
func Decode(tok string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case Byte(c):
			b.WriteByte(c)
		case c == '~' && i+2 < len(tok) && isLowerHex(tok[i+1]) && isLowerHex(tok[i+2]):
			v, _ := strconv.ParseUint(tok[i+1:i+3], 16, 8)
			if Byte(byte(v)) {
				return "", false // Encode writes such a byte as itself
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), tok != ""
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }
