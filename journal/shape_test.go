package journal

import (
	"fmt"
	"strings"
	"testing"
)

const shapeTemplate = `{"engine_run_id":"run-1","seq":7,"type":"spend","at":"2026-11-30T01:59:17.123456789Z","data":{"unit":3,"ok":true,"note":"x"}}`

// TestALineOfAKnownShapeIsCheckedAsFullyAsAnyOther learns the shape of one good line, then checks
// lines that keep its text but change a value: each must get exactly the verdict, run and seq of the
// full parser, whether the shape takes it or hands it over.
func TestALineOfAKnownShapeIsCheckedAsFullyAsAnyOther(t *testing.T) {
	swap := func(old, new string) string { return strings.Replace(shapeTemplate, old, new, 1) }
	for _, line := range []string{
		shapeTemplate,
		swap(`"run-1"`, `"run-2"`),
		swap(`"run-1"`, `"r\u00e9n"`), // an escaped run id: decoded
		swap(`"run-1"`, `"rün"`),      // UTF-8
		swap(`"run-1"`, `""`),         // empty run id
		swap(`"run-1"`, `"r\x01n"`),   // a control byte
		swap(`"run-1"`, "\"r\xffn\""), // not UTF-8
		swap(`"run-1"`, `"r\qn"`),     // a bad escape
		swap(`"run-1"`, `"r\u12"`),    // a short \u
		swap(`"run-1"`, `7`),          // a number where the string was
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
	} {
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
	if _, _, _, seq, ok := s.shapes[0].match(line(maxShapes+3, 5)); !ok || seq != 5 {
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

// FuzzParseShaped: after learning the shape of a, the verdict on b is the full parser's.
func FuzzParseShaped(f *testing.F) {
	f.Add([]byte(shapeTemplate), []byte(strings.Replace(shapeTemplate, `"seq":7`, `"seq":8`, 1)))
	f.Add([]byte(shapeTemplate), []byte(strings.Replace(shapeTemplate, `"run-1"`, `"\u0041"`, 1)))
	f.Add([]byte(`{"engine_run_id":"a","seq":1,"d":[1,"x",null]}`), []byte(`{"engine_run_id":"a","seq":2,"d":[1,"\ud800",null]}`))
	f.Add([]byte(`{"seq":1,"engine_run_id":"a"}`), []byte(`{"seq":1.0,"engine_run_id":"a"}`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var shaped, full scanner
		shaped.parseShaped(a)
		r1, s1, w1 := shaped.parseShaped(b)
		r2, s2, w2 := full.parse(b)
		if string(r1) != string(r2) || s1 != s2 || w1 != w2 ||
			(w1 == whyNone && (shaped.runAt != full.runAt || shaped.runEsc != full.runEsc)) {
			t.Fatalf("after %q, %q: shaped (%q, %d, %q, %d) full (%q, %d, %q, %d)", a, b, r1, s1, w1, shaped.runAt, r2, s2, w2, full.runAt)
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

// BenchmarkParse: the full parser beside the shaped one, on one core.
func BenchmarkParse(b *testing.B) {
	lines := benchLines()
	for _, mode := range []string{"full", "shaped"} {
		b.Run(mode, func(b *testing.B) {
			var s scanner
			for b.Loop() {
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
