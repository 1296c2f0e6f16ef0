// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

const shapeTemplate = `{"engine_run_id":"run-1","seq":7,"type":"spend","at":"2026-11-30T01:59:17.123456789Z","data":{"unit":3,"ok":true,"note":"x"}}`

// TestALineOfAKnownShapeIsCheckedAsFullyAsAnyOther learns the shape of one good line, then checks
// lines that keep its text but change a value: each must get exactly the verdict, run and seq of the
// full parser, whether the shape takes it or hands it over.
func TestALineOfAKnownShapeIsCheckedAsFullyAsAnyOther(t *testing.T) {
	for _, line := range shapeVariants() {
		var shaped, full scanner
		shaped.parseShaped([]byte(shapeTemplate))
		if len(shaped.shapes) != 1 {
			t.Fatalf("no shape learnt from %s", shapeTemplate)
		}
		r1, s1, w1 := shaped.parseShaped([]byte(line))
		r2, s2, w2 := full.parse([]byte(line))
		if string(r1) != string(r2) || s1 != s2 || w1 != w2 ||
			(w1 == whyNone && (shaped.runAt != full.runAt || shaped.runEsc != full.runEsc)) {
			t.Errorf("%s:\nshaped (%q, %d, %q, at %d)\nfull   (%q, %d, %q, at %d)", line, r1, s1, w1, shaped.runAt, r2, s2, w2, full.runAt)
		}
	}
}

// shapeVariants are lines that keep shapeTemplate's text and change one value, or stray from it at
// one point.
func shapeVariants() []string {
	swap := func(old, new string) string { return strings.Replace(shapeTemplate, old, new, 1) }
	return []string{
		shapeTemplate,
		swap(`"run-1"`, `"run-2"`),
		swap(`"run-1"`, `"r\u00e9n"`),     // an escaped run id: decoded
		swap(`"run-1"`, `"\ud83d\ude00"`), // a surrogate pair: one character
		swap(`"run-1"`, `"\ud800"`),       // a lone high surrogate
		swap(`"run-1"`, `"r\udfffn"`),     // a lone low surrogate
		swap(`"run-1"`, `"\ud800\u0041"`), // a high surrogate and no low one
		swap(`"run-1"`, `"\udc00\ud800"`), // the pair the wrong way round
		swap(`"run-1"`, `"rün"`),          // UTF-8
		swap(`"run-1"`, `""`),             // empty run id
		swap(`"run-1"`, `"r\x01n"`),       // a control byte
		swap(`"run-1"`, "\"r\xffn\""),     // not UTF-8
		swap(`"run-1"`, `"r\qn"`),         // a bad escape
		swap(`"run-1"`, `"r\u12"`),        // a short \u
		swap(`"run-1"`, `7`),              // a number where the string was
		swap(`"seq":7`, `"seq":12345`),
		swap(`"seq":7`, `"seq":1.5`),                  // not an integer
		swap(`"seq":7`, `"seq":1e3`),                  // not an integer
		swap(`"seq":7`, `"seq":0`),                    // below 1
		swap(`"seq":7`, `"seq":-3`),                   // below 1
		swap(`"seq":7`, `"seq":07`),                   // not JSON
		swap(`"seq":7`, `"seq":99999999999999999999`), // out of range
		swap(`"seq":7`, `"seq":"7"`),                  // a string where the number was
		swap(`"unit":3`, `"unit":-0.5e-3`),            // another number
		swap(`"unit":3`, `"unit":3.`),                 // not JSON
		swap(`"note":"x"`, `"note":"a \"quoted\" word"`),
		swap(`"note":"x"`, `"note":"x`),      // unterminated
		swap(`"ok":true`, `"ok":false`),      // another shape
		swap(`"type"`, `"seq"`),              // seq given twice: another shape
		shapeTemplate + ` `,                  // trailing blank: another shape, still good
		shapeTemplate + `x`,                  // trailing text
		shapeTemplate[:len(shapeTemplate)-1], // truncated
	}
}

// TestALineInABlockIsCheckedAsFullyAsAnyOther is the same check for lines as Verify's workers take
// them: followed by the rest of the block, so that the fast path (16 bytes at a time) has room to
// run, and also at the very end of the block, where it has none.
func TestALineInABlockIsCheckedAsFullyAsAnyOther(t *testing.T) {
	for _, line := range shapeVariants() {
		for _, rest := range []string{"", "\n", "\n" + shapeTemplate + "\n" + strings.Repeat("x", 64) + "\n"} {
			if strings.Contains(line, "\n") {
				continue
			}
			var shaped, full scanner
			shaped.parseNext([]byte(shapeTemplate + "\n" + strings.Repeat(" ", 40)))
			if len(shaped.shapes) != 1 {
				t.Fatalf("no shape learnt from %s", shapeTemplate)
			}
			n, r1, s1, w1 := shaped.parseNext([]byte(line + rest))
			r2, s2, w2 := full.parse([]byte(line))
			if n != len(line) || string(r1) != string(r2) || s1 != s2 || w1 != w2 ||
				(w1 == whyNone && (shaped.runAt != full.runAt || shaped.runEsc != full.runEsc)) {
				t.Errorf("%s + %q:\nshaped (%d, %q, %d, %q, at %d)\nfull   (%q, %d, %q, at %d)", line, rest, n, r1, s1, w1, shaped.runAt, r2, s2, w2, full.runAt)
			}
		}
	}
}

// TestTheFastPathTakesLinesWithRoomToSpare: where matchSteps exists, it decides a plain line that has
// 16 bytes after it, and a line that strays from the shape's text, without the generic match.
func TestTheFastPathTakesLinesWithRoomToSpare(t *testing.T) {
	if !haveMatchSteps {
		t.Skip("no fast path on this platform")
	}
	sh := learn([]byte(shapeTemplate))
	var vals [2 * (maxValues + 2)]int
	line := strings.Replace(shapeTemplate, `"seq":7`, `"seq":8`, 1)
	if n, res := matchSteps([]byte(line+"\n"+strings.Repeat(" ", 16)), sh.line[:cap(sh.line)], sh.fast, vals[:]); res != resMatch || n != len(line) {
		t.Errorf("a plain line: (%d, %d), want (%d, %d)", n, res, len(line), resMatch)
	}
	other := strings.Replace(shapeTemplate, `"ok":true`, `"ok":false`, 1)
	if _, res := matchSteps([]byte(other+"\n"+strings.Repeat(" ", 16)), sh.line[:cap(sh.line)], sh.fast, vals[:]); res != resMismatch {
		t.Errorf("a line of another shape: %d, want %d", res, resMismatch)
	}
	if _, res := matchSteps([]byte(line), sh.line[:cap(sh.line)], sh.fast, vals[:]); res != resUnsure {
		t.Errorf("a line with no room after it: %d, want %d", res, resUnsure)
	}
	// An escape is never decided here: the Go match decodes the run id and checks its surrogates.
	for _, run := range []string{`"\ud800"`, `"r\u0041"`, `"\ud83d\ude00"`} {
		esc := strings.Replace(shapeTemplate, `"run-1"`, run, 1)
		if _, res := matchSteps([]byte(esc+"\n"+strings.Repeat(" ", 16)), sh.line[:cap(sh.line)], sh.fast, vals[:]); res != resUnsure {
			t.Errorf("a run id %s: %d, want %d", run, res, resUnsure)
		}
	}
}

// TestAShapeReadsNothingPastItsInput cuts a line short at every byte, inside a buffer that goes on
// with the rest of the line: a slice can be re-sliced up to its capacity, and a match that compared
// its text there would take the cut line for the whole one.
func TestAShapeReadsNothingPastItsInput(t *testing.T) {
	full := `{"engine_run_id":"r","seq":1,"a_member_name_longer_than_24_bytes":"x","n":12}`
	sh := learn([]byte(full))
	var vals [2 * (maxValues + 2)]int
	buf := []byte(full + "\n" + strings.Repeat(" ", 32))
	for cut := range len(full) {
		b := buf[:cut]
		if _, _, _, _, _, ok := sh.match(b, vals[:]); ok {
			t.Errorf("the first %d bytes matched the shape", cut)
		}
		if _, _, _, _, _, ok := sh.matchGeneric(b); ok {
			t.Errorf("the first %d bytes matched the shape (generic)", cut)
		}
	}
}

// FuzzMatchSteps: whatever follows the line, the fast path's answer is the generic match's.
func FuzzMatchSteps(f *testing.F) {
	for _, v := range shapeVariants() {
		f.Add([]byte(shapeTemplate), []byte(v+"\n"+strings.Repeat(" ", 20)))
	}
	f.Add([]byte(`{"engine_run_id":"a","seq":1,"n":-12,"s":"0123456789abcdefghij"}`), []byte(`{"engine_run_id":"b","seq":22,"n":-0,"s":"0123456789abcdefghijk"}`+"\n{}"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var full scanner
		if _, _, w := full.parse(a); w != whyNone {
			return
		}
		sh := learn(a)
		if sh == nil {
			return
		}
		var vals [2 * (maxValues + 2)]int
		r1, at1, e1, s1, n1, ok1 := sh.match(b, vals[:])
		r2, at2, e2, s2, n2, ok2 := sh.matchGeneric(b)
		if ok1 != ok2 || ok1 && (string(r1) != string(r2) || at1 != at2 || e1 != e2 || s1 != s2 || n1 != n2) {
			t.Fatalf("shape of %q on %q:\nfast    (%q, %d, %v, %d, %d, %v)\ngeneric (%q, %d, %v, %d, %d, %v)", a, b, r1, at1, e1, s1, n1, ok1, r2, at2, e2, s2, n2, ok2)
		}
	})
}

// TestShapesAreLearntAndForgottenByUse checks the cache: a line of a known shape does not add one, a
// new shape goes in front, and no more than maxShapes are kept.
func TestShapesAreLearntAndForgottenByUse(t *testing.T) {
	var s scanner
	line := func(kind, seq int) []byte {
		return fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"k%d":1}`, seq, kind)
	}
	for i := 1; i <= 3; i++ {
		s.parseShaped(line(0, i))
	}
	if len(s.shapes) != 1 {
		t.Fatalf("%d shapes after three lines of one shape", len(s.shapes))
	}
	for k := 1; k <= maxShapes+3; k++ {
		if _, seq, w := s.parseShaped(line(k, 100+k)); w != whyNone || seq != int64(100+k) {
			t.Fatalf("shape %d: (%d, %v)", k, seq, w)
		}
	}
	if len(s.shapes) != maxShapes {
		t.Fatalf("%d shapes kept, want %d", len(s.shapes), maxShapes)
	}
	if _, _, _, seq, _, ok := s.shapes[0].match(line(maxShapes+3, 5), s.vals[:]); !ok || seq != 5 {
		t.Errorf("the newest shape is not first")
	}
}

// TestLearningPausesWhenEveryLineIsNew feeds lines that all differ in shape: the verdicts stay right,
// and the scanner stops learning shapes that are never used.
func TestLearningPausesWhenEveryLineIsNew(t *testing.T) {
	var s scanner
	learnt := 0
	for i := 1; i <= 1000; i++ {
		before := s.shapes
		l := fmt.Appendf(nil, `{"engine_run_id":"r","seq":%d,"k%d":1}`, i, i)
		if _, seq, w := s.parseShaped(l); w != whyNone || seq != int64(i) {
			t.Fatalf("line %d: (%d, %v)", i, seq, w)
		}
		if len(s.shapes) > 0 && (len(before) == 0 || s.shapes[0] != before[0]) {
			learnt++
		}
	}
	if learnt > 100 {
		t.Errorf("%d shapes learnt from 1000 lines of 1000 shapes", learnt)
	}
}

// FuzzParseShaped: after learning the shape of a, the verdict on b is the full parser's, and the key
// of a line it accepts is the one encoding/json reads into a struct.
func FuzzParseShaped(f *testing.F) {
	f.Add([]byte(shapeTemplate), []byte(strings.Replace(shapeTemplate, `"seq":7`, `"seq":8`, 1)))
	f.Add([]byte(shapeTemplate), []byte(strings.Replace(shapeTemplate, `"run-1"`, `"\u0041"`, 1)))
	f.Add([]byte(`{"engine_run_id":"a","seq":1,"d":[1,"x",null]}`), []byte(`{"engine_run_id":"a","seq":2,"d":[1,"\ud800",null]}`))
	f.Add([]byte(`{"seq":1,"engine_run_id":"a"}`), []byte(`{"seq":1.0,"engine_run_id":"a"}`))
	f.Add([]byte(`{"engine_run_id":"a","seq":1,"SEX":1}`), []byte(`{"engine_run_id":"a","seq":2,"SEQ":1}`))
	f.Add([]byte(`{"engine_run_id":"a","seq":1,"s":1}`), []byte(`{"engine_run_id":"a","seq":2,"\u017feq":1}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var shaped, full scanner
		shaped.parseShaped(a)
		r1, s1, w1 := shaped.parseShaped(b)
		r2, s2, w2 := full.parse(b)
		if string(r1) != string(r2) || s1 != s2 || w1 != w2 ||
			(w1 == whyNone && (shaped.runAt != full.runAt || shaped.runEsc != full.runEsc)) {
			t.Fatalf("after %q, %q: shaped (%q, %d, %q, %d) full (%q, %d, %q, %d)", a, b, r1, s1, w1, shaped.runAt, r2, s2, w2, full.runAt)
		}
		if w1 == whyNone {
			checkStructKey(t, b, string(r1), s1)
		}
	})
}

// benchLines are lines as journal.Builder renders them, 50 runs interleaved.
func benchLines() [][]byte {
	var out [][]byte
	for i := 0; i < 10000; i++ {
		out = append(out, fmt.Appendf(nil, `{"engine_run_id":"run-%02d-0123456789abcdef","seq":%d,"type":"spend","at":"2026-11-30T01:59:17.123456789Z","data":{"unit":%d,"amount":%d,"note":"%s"}}`,
			i%50, i/50+1, i, i%1000, strings.Repeat("x", 40)))
	}
	return out
}

// BenchmarkParse: the full parser beside the shaped one, on one core: line by line as Check takes
// them, and through a block of lines as Verify's workers take them.
func BenchmarkParse(b *testing.B) {
	lines := benchLines()
	block := append(bytes.Join(lines, []byte("\n")), '\n')
	for _, mode := range []string{"full", "shaped", "block"} {
		b.Run(mode, func(b *testing.B) {
			var s scanner
			for b.Loop() {
				if mode == "block" {
					for rest := block; len(rest) > 0; {
						n, _, _, _ := s.parseNext(rest)
						rest = rest[n+1:]
					}
					continue
				}
				for _, l := range lines {
					if mode == "full" {
						s.parse(l)
					} else {
						s.parseShaped(l)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(lines)), "ns/line")
		})
	}
}

// TestLongLinesAreNotLearnt: a shape keeps a copy of its line, so a long line is checked in full and
// never kept.
func TestLongLinesAreNotLearnt(t *testing.T) {
	var s scanner
	long := fmt.Appendf(nil, `{"engine_run_id":"r","seq":1,"pad":"%s"}`, strings.Repeat("x", maxShapeLine))
	if _, seq, w := s.parseShaped(long); w != whyNone || seq != 1 {
		t.Fatalf("(%d, %v)", seq, w)
	}
	if len(s.shapes) != 0 {
		t.Errorf("a %d-byte line was learnt", len(long))
	}
}

// TestAStringIsCheckedWholeAcrossScanWindows: a string is scanned in windows of plainWindow bytes (a
// scan in assembly cannot be preempted), so what sits at a window's edge is checked like the rest.
func TestAStringIsCheckedWholeAcrossScanWindows(t *testing.T) {
	for _, at := range []int{0, plainWindow - 1, plainWindow, plainWindow + 1, 2*plainWindow + 5} {
		for _, tc := range []struct {
			insert string
			want   why
		}{{"", whyNone}, {"\x01", whyNotJSONOrUTF8}, {`\"`, whyNone}, {"é", whyNone}, {"\xff", whyNotJSONOrUTF8}} {
			body := strings.Repeat("x", 3*plainWindow)
			body = body[:at] + tc.insert + body[at:]
			line := `{"engine_run_id":"r","seq":2,"pad":"` + body + `"}`
			var s scanner
			s.parseNext([]byte(`{"engine_run_id":"r","seq":1,"pad":"x"}` + "\n"))
			if len(s.shapes) != 1 {
				t.Fatal("no shape learnt")
			}
			n, _, seq, w := s.parseNext([]byte(line + "\n" + strings.Repeat(" ", 32)))
			if n != len(line) || w != tc.want || (w == whyNone && seq != 2) {
				t.Errorf("%q at %d: (%d, %d, %q), want (%d, 2, %q)", tc.insert, at, n, seq, w, len(line), tc.want)
			}
			if _, _, w := s.parse([]byte(line)); w != tc.want {
				t.Errorf("%q at %d, full parse: %q, want %q", tc.insert, at, w, tc.want)
			}
		}
	}
}

// TestFastStepIsLaidOutAsMatchStepsReadsIt: the assembly takes fastStep's offsets and size from
// go_asm.h, but loads each field, and each int of vals, as 8 bytes (MOVQ): that width is what go_asm.h
// does not carry.
func TestFastStepIsLaidOutAsMatchStepsReadsIt(t *testing.T) {
	if !haveMatchSteps {
		t.Skip("no assembly on this platform")
	}
	var st fastStep
	var v int
	if unsafe.Sizeof(st.off) != 8 || unsafe.Sizeof(st.n) != 8 || unsafe.Sizeof(st.kind) != 8 || unsafe.Sizeof(v) != 8 {
		t.Fatalf("fastStep's fields are %d, %d and %d bytes wide, an int %d; match_amd64.s loads 8",
			unsafe.Sizeof(st.off), unsafe.Sizeof(st.n), unsafe.Sizeof(st.kind), unsafe.Sizeof(v))
	}
}
