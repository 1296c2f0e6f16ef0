// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// parseLine checks that b is one JSON object (RFC 8259, UTF-8) and finds its top-level
// "engine_run_id" and "seq" members in the same pass. Member names match exactly, byte for byte after
// unescaping; a member given twice is ambiguous and refused, and so is a member whose name is not the
// key but folds to it as encoding/json folds names (see foldsTo): a reader that decodes the line
// into a struct tagged `json:"seq"` would take "SEQ" or "ſeq" for the key, and the line would be
// keyed one way here and another there. seq must be a JSON integer, with no fraction or exponent.
// runID is the raw string body, unescaped only when it holds an escape. It returns a reason when the
// line is malformed.
//
// It is a hand-written scanner rather than json.Valid plus a second walk because verifying a journal
// is bound by this function: string bodies, most of a line, are skipped 8 bytes at a time.
func parseLine(b []byte) (runID []byte, seq int64, reason string) {
	var s scanner
	runID, seq, w := s.parse(b)
	return runID, seq, w.String()
}

// why is the reason a line is malformed, as a code: the parser returns it without building a string.
type why uint8

const (
	whyNone why = iota
	whyNotJSON
	whyNotJSONOrUTF8
	whyTrailing
	whyNotObject
	whyNoRun
	whyNoSeq
	whyRunEmpty
	whySeqBelow1
	whySeqNotNumber
	whySeqNotInteger
	whySeqRange
	whyRunTwice
	whyRunNotString
	whySeqTwice
	whyRunSurrogate
	whyTooLong
	whyRunFolded
	whySeqFolded
)

var whyText = [...]string{
	whyNone:          "",
	whyNotJSON:       "not JSON",
	whyNotJSONOrUTF8: "not JSON (or not UTF-8)",
	whyTrailing:      "not JSON (text after the object)",
	whyNotObject:     "not a JSON object",
	whyNoRun:         `no "engine_run_id"`,
	whyNoSeq:         `no "seq"`,
	whyRunEmpty:      `"engine_run_id" is empty`,
	whySeqBelow1:     `"seq" is below 1`,
	whySeqNotNumber:  `"seq" is not a number`,
	whySeqNotInteger: `"seq" is not an integer`,
	whySeqRange:      `"seq" is out of range`,
	whyRunTwice:      `"engine_run_id" given twice`,
	whyRunNotString:  `"engine_run_id" is not a string`,
	whySeqTwice:      `"seq" given twice`,
	whyRunSurrogate:  `"engine_run_id" holds an escape that is not a character (a lone surrogate)`,
	whyTooLong:       "line too long",
	whyRunFolded:     `a member named like "engine_run_id" but not exactly it (encoding/json would read it as the key)`,
	whySeqFolded:     `a member named like "seq" but not exactly it (encoding/json would read it as the key)`,
}

func (w why) String() string { return whyText[w] }

// parse is parseLine on a scanner that is reused from line to line, so that its container stack is
// allocated once.
func (s *scanner) parse(b []byte) (runID []byte, seq int64, reason why) {
	s.b, s.i = b, 0
	s.skipSpace()
	if s.i >= len(b) || b[s.i] != '{' {
		if s.i < len(b) && s.value() && s.onlySpaceLeft() {
			return nil, 0, whyNotObject
		}
		return nil, 0, whyNotJSON
	}
	s.i++
	s.skipSpace()
	var haveRun, haveSeq bool
	// A member's problem is reported only once the whole line is known to be JSON: a truncated line
	// is whyNotJSON whatever its first member holds.
	problem := whyNone
	note := func(w why) {
		if problem == whyNone {
			problem = w
		}
	}
	if s.peek('}') {
		s.i++
	} else {
		for {
			if !s.peek('"') {
				return nil, 0, whyNotJSON
			}
			k0 := s.i
			if !s.skipString() {
				return nil, 0, whyNotJSONOrUTF8
			}
			key := b[k0+1 : s.i-1]
			escaped := s.esc
			s.skipSpace()
			if !s.peek(':') {
				return nil, 0, whyNotJSON
			}
			s.i++
			s.skipSpace()
			v0 := s.i
			if !s.value() {
				return nil, 0, whyNotJSONOrUTF8
			}
			val := b[v0:s.i]
			if escaped {
				var k string
				json.Unmarshal(b[k0:k0+len(key)+2], &k) // a valid string: cannot fail
				key = []byte(k)
			}
			switch string(key) {
			case "engine_run_id":
				switch {
				case haveRun:
					note(whyRunTwice)
				case val[0] != '"':
					note(whyRunNotString)
				case s.esc && !validEscapes(val[1:len(val)-1]):
					// Decoded, a lone surrogate becomes U+FFFD: two different run ids would be one.
					note(whyRunSurrogate)
				default:
					runID = val[1 : len(val)-1]
					if s.esc {
						var r string
						json.Unmarshal(val, &r)
						runID = []byte(r)
					}
				}
				haveRun = true
			case "seq":
				if haveSeq {
					note(whySeqTwice)
				}
				haveSeq = true
				n, w := integer(val)
				if w != whyNone {
					note(w)
				}
				seq = n
			default:
				// A name shorter than a key cannot fold to it: most names cost a comparison or
				// two.
				if len(key) >= len("seq") && foldsTo(key, "SEQ") {
					note(whySeqFolded)
				} else if len(key) >= len("engine_run_id") && foldsTo(key, "ENGINE_RUN_ID") {
					note(whyRunFolded)
				}
			}
			s.skipSpace()
			if s.peek(',') {
				s.i++
				s.skipSpace()
				continue
			}
			if s.peek('}') {
				s.i++
				break
			}
			return nil, 0, whyNotJSON
		}
	}
	if !s.onlySpaceLeft() {
		return nil, 0, whyTrailing
	}
	switch {
	case problem != whyNone:
		return runID, seq, problem
	case !haveRun:
		return nil, seq, whyNoRun
	case !haveSeq:
		return runID, 0, whyNoSeq
	case len(runID) == 0:
		return nil, seq, whyRunEmpty
	case seq < 1:
		return runID, seq, whySeqBelow1
	}
	return runID, seq, whyNone
}

// foldsTo reports whether name, an unescaped member name, folds to upper (a key's name in upper
// case, ASCII) as encoding/json folds names to match them to a struct's fields (foldName in its
// fold.go): an ASCII byte is upper-cased, any other character becomes the smallest character of its
// Unicode simple folding orbit, so "ſ" (U+017F) folds to "S" and the Kelvin sign (U+212A) to "K".
// The two folded names are compared byte for byte, so every character of name must fold to one
// ASCII byte.
func foldsTo(name []byte, upper string) bool {
	j := 0
	for i := 0; i < len(name); j++ {
		if j == len(upper) {
			return false
		}
		c := name[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			i++
		} else {
			r, n := utf8.DecodeRune(name[i:])
			f := foldRune(r)
			if f >= utf8.RuneSelf {
				return false
			}
			c = byte(f)
			i += n
		}
		if c != upper[j] {
			return false
		}
	}
	return j == len(upper)
}

// foldRune is encoding/json's: the smallest rune of r's simple folding orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// integer parses a JSON number token that must be an integer.
func integer(tok []byte) (int64, why) {
	neg := tok[0] == '-'
	digits := tok
	if neg {
		digits = tok[1:]
	}
	if len(digits) == 0 || digits[0] < '0' || digits[0] > '9' {
		return 0, whySeqNotNumber
	}
	var n uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, whySeqNotInteger
		}
		if n > (1<<63-1)/10 {
			return 0, whySeqRange
		}
		n = n*10 + uint64(c-'0')
		if n > 1<<63-1 {
			return 0, whySeqRange
		}
	}
	if neg {
		return -int64(n), whyNone
	}
	return int64(n), whyNone
}

type scanner struct {
	b     []byte
	i     int
	esc   bool   // the last string scanned held an escape
	stack []byte // open containers of the value being scanned
}

// parseNext parses the line at the start of b, which is whole lines each ending in a newline (or one
// line without it), and returns its length.
func (s *scanner) parseNext(b []byte) (n int, runID []byte, seq int64, reason why) {
	n = bytes.IndexByte(b, '\n')
	if n < 0 {
		n = len(b)
	}
	runID, seq, reason = s.parse(b[:n])
	return n, runID, seq, reason
}

// LineKey returns the (engine_run_id, seq) a journal line is keyed by, with the same rules as Verify:
// an error wrapping ErrMalformed when the line is not a JSON object with a non-empty string
// "engine_run_id" and an integer "seq" of at least 1. A sink that routes lines by run uses it.
func LineKey(line []byte) (runID string, seq int64, err error) {
	run, seq, w := parseLine(line)
	if w != "" {
		return "", 0, fmt.Errorf("%w: %s", ErrMalformed, w)
	}
	return string(run), seq, nil
}
