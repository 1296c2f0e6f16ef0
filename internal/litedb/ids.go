// SPDX-License-Identifier: Apache-2.0

package litedb

import (
	"fmt"
	"unicode/utf8"
)

// IDProblem says what is wrong with an id (a run id, a once key, a source's name), or returns "": it
// must not be empty, be longer than maxLen bytes, hold a control byte (U+0000 to U+001F, U+007F), or
// be invalid UTF-8. No stored id is any of these, and two ids that print alike would merge two
// streams.
func IDProblem(id string, maxLen int) string {
	if id == "" {
		return "empty"
	}
	if len(id) > maxLen {
		return fmt.Sprintf("%d bytes, at most %d", len(id), maxLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c == 0x7f {
			return fmt.Sprintf("control byte 0x%02x at offset %d", c, i)
		}
	}
	if !utf8.ValidString(id) {
		return "not valid UTF-8"
	}
	return ""
}
