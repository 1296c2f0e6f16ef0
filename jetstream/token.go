// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"strconv"
	"strings"
)

// MsgID returns the Nats-Msg-Id of a run's line: Token(runID), a colon, and the seq.
func MsgID(runID string, seq int64) string { return Token(runID) + ":" + strconv.FormatInt(seq, 10) }

// Token encodes a run id as a single subject token, reversibly: letters, digits, '-' and '_' stay, any
// other byte becomes '~' and two lowercase hex digits.
func Token(runID string) string {
	var b strings.Builder
	b.Grow(len(runID))
	for i := 0; i < len(runID); i++ {
		c := runID[i]
		if tokenByte(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('~')
			b.WriteByte("0123456789abcdef"[c>>4])
			b.WriteByte("0123456789abcdef"[c&15])
		}
	}
	return b.String()
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// runOfToken decodes a token; ok is false when tok is not one Token makes.
func runOfToken(tok string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case tokenByte(c):
			b.WriteByte(c)
		case c == '~' && i+2 < len(tok) && isLowerHex(tok[i+1]) && isLowerHex(tok[i+2]):
			v, _ := strconv.ParseUint(tok[i+1:i+3], 16, 8)
			if tokenByte(byte(v)) {
				return "", false // Token writes such a byte as itself
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
