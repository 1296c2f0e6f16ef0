// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

func (s *scanner) peek(c byte) bool { return s.i < len(s.b) && s.b[s.i] == c }

func (s *scanner) skipSpace() {
	// Journal lines are compact: the common case is one comparison.
	for s.i < len(s.b) && s.b[s.i] <= ' ' {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// onlySpaceLeft reports whether only whitespace is left.
func (s *scanner) onlySpaceLeft() bool {
	s.skipSpace()
	return s.i == len(s.b)
}

// skipString scans the string at s.b[s.i] == '"' and leaves s.i past its closing quote.
func (s *scanner) skipString() bool {
	end, esc := scanString(s.b, s.i)
	if end < 0 {
		return false
	}
	s.i, s.esc = end, esc
	return true
}

// scanString scans the string that starts at b[i] == '"', validating escapes and UTF-8. It returns
// the index just past the closing quote, or -1, and whether the string held an escape.
func scanString(b []byte, i int) (end int, esc bool) {
	i++
	for {
		i += plainLen(b[i:])
		if i >= len(b) {
			return -1, esc
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, esc
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return -1, esc
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return -1, esc
				}
				for _, h := range b[i+2 : i+6] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return -1, esc
					}
				}
				i += 6
			default:
				return -1, esc
			}
		case c < 0x20:
			return -1, esc
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && n == 1 {
				return -1, esc
			}
			i += n
		}
	}
}

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

// number scans a JSON number at s.b[s.i].
func (s *scanner) number() bool {
	end := scanNumber(s.b, s.i)
	if end < 0 {
		return false
	}
	s.i = end
	return true
}

// scanNumber scans the JSON number at b[i] and returns the index just past it, or -1.
func scanNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return -1
		}
	}
	return i
}

func (s *scanner) literal(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// value scans one JSON value of any depth. Containers are tracked on an explicit stack, so a line of
// a million '[' costs memory, not the goroutine's stack.
func (s *scanner) value() bool {
	s.stack = s.stack[:0]
	esc := false // a string value's escape flag, kept for the caller when the value is a string
	for {
		// One scalar, or the opening of a container.
		s.skipSpace()
		if s.i >= len(s.b) {
			return false
		}
		switch c := s.b[s.i]; c {
		case '{', '[':
			s.i++
			s.skipSpace()
			if (c == '{' && s.peek('}')) || (c == '[' && s.peek(']')) {
				s.i++
				break
			}
			s.stack = append(s.stack, c)
			if c == '{' && !s.member() {
				return false
			}
			continue
		case '"':
			if !s.skipString() {
				return false
			}
			esc = s.esc
		case 't':
			if !s.literal("true") {
				return false
			}
		case 'f':
			if !s.literal("false") {
				return false
			}
		case 'n':
			if !s.literal("null") {
				return false
			}
		default:
			if !s.number() {
				return false
			}
		}
		// After a value: close containers, or move to the next element.
		for {
			if len(s.stack) == 0 {
				s.esc = esc
				return true
			}
			s.skipSpace()
			if s.i >= len(s.b) {
				return false
			}
			top := s.stack[len(s.stack)-1]
			c := s.b[s.i]
			if c == ',' {
				s.i++
				if top == '{' {
					s.skipSpace()
					if !s.member() {
						return false
					}
				}
				break
			}
			if (top == '{' && c == '}') || (top == '[' && c == ']') {
				s.i++
				s.stack = s.stack[:len(s.stack)-1]
				continue
			}
			return false
		}
		esc = false
	}
}

// member scans `"name" :` inside an object.
func (s *scanner) member() bool {
	if !s.peek('"') || !s.skipString() {
		return false
	}
	s.skipSpace()
	if !s.peek(':') {
		return false
	}
	s.i++
	return true
}
