// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
)

// A journal's lines come in a few shapes: every line of one event type has the same members in the
// same order, and lines differ in their scalar values only. A shape is learnt from a line the full
// parser accepted, as the text between its scalar values (member names, punctuation, whitespace,
// literals) and the kind of each value. A later line that has the same text around values of the same
// kinds is valid JSON with the same structure: replacing a scalar value with another valid one of the
// same kind keeps a JSON text valid. Checking that costs a comparison of the shape's text and a scan of
// each value, instead of a scan of every member name and every structural byte. A line that strays
// from every shape at any point is parsed in full, so the reasons for a malformed line, and the run
// and seq of a good one, are the full parser's. Member names are part of the text, so a line that
// matches a shape has, byte for byte, the member names of a line the full parser accepted: none that
// folds to a key's name (see foldsTo) without being it, with no check of its own here or in
// matchSteps.

// shape is the skeleton of one accepted line: steps[k] is the text before value k and that value's
// kind; the last step holds the text after the last value.
type shape struct {
	line  []byte // the line it was learnt from, which the steps' text points into, with at least 16 bytes of capacity past it for matchSteps to read
	steps []step
	fast  []fastStep
	run   int // the value that is the top-level "engine_run_id" (a string)
	seq   int // the value that is the top-level "seq" (a number)
}

// step is a stretch of a shape's text and the kind of the value after it. The text's first 24 bytes
// are also kept as words and masks, so that where the input has 24 bytes to spare the comparison is
// three loads and no call.
type step struct {
	lit  []byte
	fast fastStep
	w, m [3]uint64
	kind byte // kindString, kindNumber or kindEnd
}

// The kinds of a step's value. match_amd64.s reads them as const_kindString and so on.
const (
	kindEnd    = 0   // no value: the line ends after the text
	kindString = 's' // a string's body (its quotes are in the text)
	kindNumber = 'n' // a number
)

// fastStep is a step as matchSteps reads it: the text as an offset and a length in the shape's line.
// match_amd64.s reads its fields and size from go_asm.h (fastStep_off, fastStep__size, …), so that a
// changed struct changes the assembly with it.
type fastStep struct {
	off, n, kind int
}

// matchSteps' answers; match_amd64.s reads them as const_resMismatch and so on.
const (
	resMismatch = 0
	resMatch    = 1
	resUnsure   = 2
)

func newStep(line []byte, start, end int, kind byte) step {
	lit := line[start:end]
	st := step{lit: lit, kind: kind, fast: fastStep{off: start, n: end - start, kind: int(kind)}}
	for k := range min(len(lit), 24) {
		st.w[k/8] |= uint64(lit[k]) << (8 * (k % 8))
		st.m[k/8] |= 0xff << (8 * (k % 8))
	}
	return st
}

const (
	maxShapes    = 8       // shapes a scanner keeps, most recently used first
	maxValues    = 64      // values a shape may have: a line with more is not worth a shape
	maxShapeLine = 1 << 16 // longer lines are not learnt: a shape keeps a copy of its line
)

// learn makes a shape of b, a line the full parser accepted with no reason, or returns nil.
func learn(b []byte) *shape {
	// A shape is matched against a line and whatever follows it, and ends at a newline: its text
	// must not hold one (Check's caller may pass a line with a newline as whitespace).
	if len(b) > maxShapeLine || bytes.IndexByte(b, '\n') >= 0 {
		return nil
	}
	own := append(make([]byte, 0, len(b)+16), b...)
	sh := &shape{line: own, run: -1, seq: -1}
	depth := 0
	var key string // the last member name at the top level
	start := 0     // where the current stretch of text began
	for i := 0; i < len(own); {
		switch c := own[i]; {
		case c == '{' || c == '[':
			depth++
			i++
		case c == '}' || c == ']':
			depth--
			i++
		case c == '"':
			end, esc := scanString(own, i)
			if end < 0 {
				return nil // cannot happen on an accepted line
			}
			j := end
			for j < len(own) && (own[j] == ' ' || own[j] == '\t' || own[j] == '\r' || own[j] == '\n') {
				j++
			}
			if j < len(own) && own[j] == ':' {
				// A member name: part of the text.
				if depth == 1 {
					key = string(own[i+1 : end-1])
					if esc {
						json.Unmarshal(own[i:end], &key)
					}
				}
				i = end
				continue
			}
			sh.steps = append(sh.steps, newStep(own, start, i+1, kindString))
			if depth == 1 && key == "engine_run_id" {
				sh.run = len(sh.steps) - 1
			}
			start, i = end-1, end
		case c == '-' || (c >= '0' && c <= '9'):
			end := scanNumber(own, i)
			if end < 0 {
				return nil
			}
			sh.steps = append(sh.steps, newStep(own, start, i, kindNumber))
			if depth == 1 && key == "seq" {
				sh.seq = len(sh.steps) - 1
			}
			start, i = end, end
		default:
			i++ // whitespace, ':', ',', or a letter of true, false or null
		}
		if len(sh.steps) > maxValues {
			return nil
		}
	}
	sh.steps = append(sh.steps, newStep(own, start, len(own), kindEnd))
	for _, st := range sh.steps {
		sh.fast = append(sh.fast, st.fast)
	}
	if sh.run < 0 || sh.seq < 0 {
		return nil
	}
	return sh
}

// match checks the line at the start of b against the shape; b may go on past the line's newline. n
// is the line's length: the shape's text ends at a newline or at the end of b. ok is false when the
// line strays from the shape, or when its run id is empty or its seq is not an integer of at least 1:
// the full parser then says why. runAt is where the run id's body starts in b; runID is that body, or
// its decoded text when it holds an escape (esc).
//
// vals is room for matchSteps' answer: two ints per step.
func (sh *shape) match(b []byte, vals []int) (runID []byte, runAt int, esc bool, seq int64, n int, ok bool) {
	end, res := matchSteps(b, sh.line[:cap(sh.line)], sh.fast, vals)
	switch res {
	case resMismatch:
		return nil, 0, false, 0, 0, false
	case resMatch:
		r0, r1 := vals[2*sh.run], vals[2*sh.run+1]
		v, w := integer(b[vals[2*sh.seq]:vals[2*sh.seq+1]])
		if w != whyNone || v < 1 || r1 == r0 {
			return nil, 0, false, 0, 0, false
		}
		return b[r0:r1], r0, false, v, end, true
	}
	return sh.matchGeneric(b)
}

// matchGeneric is match without matchSteps: every line on other processors, and on amd64 the lines
// matchSteps is unsure of.
func (sh *shape) matchGeneric(b []byte) (runID []byte, runAt int, esc bool, seq int64, n int, ok bool) {
	i := 0
	for k := range sh.steps {
		st := &sh.steps[k]
		if len(b)-i < len(st.lit) {
			return
		}
		// Slices past len(b) are legal up to its capacity: the bound above keeps the comparisons
		// inside the line's input.
		if len(b)-i >= 24 {
			x := (binary.LittleEndian.Uint64(b[i:])^st.w[0])&st.m[0] |
				(binary.LittleEndian.Uint64(b[i+8:])^st.w[1])&st.m[1] |
				(binary.LittleEndian.Uint64(b[i+16:])^st.w[2])&st.m[2]
			if x != 0 || len(st.lit) > 24 && string(b[i+24:i+len(st.lit)]) != string(st.lit[24:]) {
				return
			}
		} else if string(b[i:i+len(st.lit)]) != string(st.lit) {
			return
		}
		i += len(st.lit)
		switch st.kind {
		case kindString:
			// The body ends at the closing quote, which the next stretch of text begins with.
			j := i + plainLen(b[i:min(len(b), i+plainWindow)])
			if j >= len(b) {
				return
			}
			e := false
			if b[j] != '"' {
				end, e1 := scanString(b, i-1)
				if end < 0 {
					return
				}
				j, e = end-1, e1
			}
			if k == sh.run {
				runID, runAt, esc = b[i:j], i, e
			}
			i = j
		case kindNumber:
			j := i
			for j < len(b) && b[j]-'0' < 10 {
				j++
			}
			// Anything but a plain run of digits not led by a zero takes the full number scan.
			if j == i || b[i] == '0' && j-i > 1 || j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
				if j = scanNumber(b, i); j < 0 {
					return
				}
			}
			if k == sh.seq {
				v, w := integer(b[i:j])
				if w != whyNone {
					return
				}
				seq = v
			}
			i = j
		default:
			if i < len(b) && b[i] != '\n' || len(runID) == 0 || seq < 1 {
				return
			}
			n = i
		}
	}
	if esc {
		if !validEscapes(runID) {
			return nil, 0, false, 0, 0, false
		}
		var r string
		json.Unmarshal(b[runAt-1:runAt+len(runID)+1], &r)
		if r == "" {
			return nil, 0, false, 0, 0, false
		}
		runID = []byte(r)
	}
	return runID, runAt, esc, seq, n, true
}

// parseShaped is parse for a stream of lines: a line of a known shape is checked against it, any
// other is parsed in full and, when accepted, becomes a known shape. When lines keep missing every
// shape (a journal whose lines all differ), learning pauses, so such a journal costs little more than
// the full parse.
func (s *scanner) parseShaped(line []byte) (runID []byte, seq int64, reason why) {
	b := line
	if len(s.shapes) > 0 && len(line) <= maxShapeLine {
		// matchSteps wants bytes to spare past the line: match a copy that has them. A run id
		// returned from the copy is good until the next call, as one from line would be.
		s.spare = append(append(s.spare[:0], line...), spare[:]...)
		b = s.spare
	}
	if run, n, ok := s.matchShapes(b); ok && n == len(line) {
		return run, s.seq, whyNone
	}
	return s.parseAndLearn(line)
}

// spare ends a line copied for matchSteps: its newline, and the 16 bytes matchSteps may read past it.
var spare = [17]byte{'\n'}

// parseNext parses the line at the start of b, which is whole lines each ending in a newline, and
// returns its length. A line of a known shape is found to end where its shape does, without a search
// for the newline first.
func (s *scanner) parseNext(b []byte) (n int, runID []byte, seq int64, reason why) {
	if run, n, ok := s.matchShapes(b); ok {
		return n, run, s.seq, whyNone
	}
	n = bytes.IndexByte(b, '\n')
	if n < 0 {
		n = len(b)
	}
	runID, seq, reason = s.parseAndLearn(b[:n])
	return n, runID, seq, reason
}

// matchShapes tries the known shapes on the line at the start of b, most recently used first.
func (s *scanner) matchShapes(b []byte) (runID []byte, n int, ok bool) {
	for k, sh := range s.shapes {
		run, at, esc, seq, n, ok := sh.match(b, s.vals[:])
		if !ok {
			continue
		}
		if k > 0 {
			copy(s.shapes[1:k+1], s.shapes[:k])
			s.shapes[0] = sh
		}
		s.runAt, s.runEsc, s.seq = at, esc, seq
		s.misses = 0
		return run, n, true
	}
	return nil, 0, false
}

func (s *scanner) parseAndLearn(b []byte) (runID []byte, seq int64, reason why) {
	runID, seq, reason = s.parse(b)
	if reason != whyNone {
		return runID, seq, reason
	}
	s.misses++
	if s.pause > 0 {
		s.pause--
		return runID, seq, reason
	}
	if s.misses >= 2*maxShapes {
		// Every recent line was new: stop learning for a while, longer each time.
		s.pauseLen = min(max(2*s.pauseLen, 64), 1<<16)
		s.pause, s.misses = s.pauseLen, 0
		return runID, seq, reason
	}
	if sh := learn(b); sh != nil {
		if len(s.shapes) < maxShapes {
			s.shapes = append(s.shapes, nil)
		}
		copy(s.shapes[1:], s.shapes[:len(s.shapes)-1])
		s.shapes[0] = sh
	}
	return runID, seq, reason
}
