package journal

import (
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
// and seq of a good one, are the full parser's.

// shape is the skeleton of one accepted line.
type shape struct {
	line  []byte   // the line it was learnt from, which lits point into
	lits  [][]byte // len(kinds)+1 stretches of text around the values
	kinds []byte   // 's': a string's body (its quotes are in lits), 'n': a number
	run   int      // the value that is the top-level "engine_run_id" (a string)
	seq   int      // the value that is the top-level "seq" (a number)
}

const (
	maxShapes    = 8       // shapes a scanner keeps, most recently used first
	maxValues    = 64      // values a shape may have: a line with more is not worth a shape
	maxShapeLine = 1 << 16 // longer lines are not learnt: a shape keeps a copy of its line
)

// learn makes a shape of b, a line the full parser accepted with no reason, or returns nil.
func learn(b []byte) *shape {
	if len(b) > maxShapeLine {
		return nil
	}
	own := append([]byte(nil), b...)
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
			sh.lits = append(sh.lits, own[start:i+1])
			sh.kinds = append(sh.kinds, 's')
			if depth == 1 && key == "engine_run_id" {
				sh.run = len(sh.kinds) - 1
			}
			start, i = end-1, end
		case c == '-' || (c >= '0' && c <= '9'):
			end := scanNumber(own, i)
			if end < 0 {
				return nil
			}
			sh.lits = append(sh.lits, own[start:i])
			sh.kinds = append(sh.kinds, 'n')
			if depth == 1 && key == "seq" {
				sh.seq = len(sh.kinds) - 1
			}
			start, i = end, end
		default:
			i++ // whitespace, ':', ',', or a letter of true, false or null
		}
		if len(sh.kinds) > maxValues {
			return nil
		}
	}
	sh.lits = append(sh.lits, own[start:])
	if sh.run < 0 || sh.seq < 0 {
		return nil
	}
	return sh
}

// match checks b against the shape. ok is false when b strays from it, or when its run id is empty or
// its seq is not an integer of at least 1: the full parser then says why. runAt is where the run id's
// body starts in b; runID is that body, or its decoded text when it holds an escape (esc).
func (sh *shape) match(b []byte) (runID []byte, runAt int, esc bool, seq int64, ok bool) {
	i := 0
	for k, kind := range sh.kinds {
		lit := sh.lits[k]
		if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != string(lit) {
			return nil, 0, false, 0, false
		}
		i += len(lit)
		if kind == 's' {
			// The body ends at the closing quote, which the next stretch of text begins with.
			end, e := scanString(b, i-1)
			if end < 0 {
				return nil, 0, false, 0, false
			}
			if k == sh.run {
				runID, runAt, esc = b[i:end-1], i, e
			}
			i = end - 1
			continue
		}
		end := scanNumber(b, i)
		if end < 0 {
			return nil, 0, false, 0, false
		}
		if k == sh.seq {
			n, w := integer(b[i:end])
			if w != whyNone {
				return nil, 0, false, 0, false
			}
			seq = n
		}
		i = end
	}
	if string(b[i:]) != string(sh.lits[len(sh.kinds)]) || len(runID) == 0 || seq < 1 {
		return nil, 0, false, 0, false
	}
	if esc {
		var r string
		json.Unmarshal(b[runAt-1:runAt+len(runID)+1], &r)
		if r == "" {
			return nil, 0, false, 0, false
		}
		runID = []byte(r)
	}
	return runID, runAt, esc, seq, true
}

// parseShaped is parse for a stream of lines: a line of a known shape is checked against it, any
// other is parsed in full and, when accepted, becomes a known shape. When lines keep missing every
// shape (a journal whose lines all differ), learning pauses, so such a journal costs little more than
// the full parse.
func (s *scanner) parseShaped(b []byte) (runID []byte, seq int64, reason why) {
	for k, sh := range s.shapes {
		if run, at, esc, n, ok := sh.match(b); ok {
			if k > 0 {
				copy(s.shapes[1:k+1], s.shapes[:k])
				s.shapes[0] = sh
			}
			s.runAt, s.runEsc = at, esc
			s.misses = 0
			return run, n, whyNone
		}
	}
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
