// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzParseLine: the hand-written scanner agrees with encoding/json on what is valid JSON, and on the
// two members whenever it accepts a line: as the members named exactly so, and as a struct tagged
// with their names reads them (which matches names case-insensitively).
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"engine_run_id":"a","seq":1}`, `{"engine_run_id":"a\u00e9","seq":12,"d":[1,{"x":"y"},null,true,-1.5e3]}`,
		`[1,2]`, `{"a":}`, `{"seq":01}`, `"\ud800"`, `{"engine\u005frun_id":"a","seq":1}`, ` {} `, `{"a":"\x01"}`, `{"engine_run_id":"\ud800\udc00","seq":1}`, `{"engine_run_id":"\udc00","seq":1}`,
		`{"engine_run_id":"r","seq":1,"ENGINE_RUN_ID":"upstream-7","SEQ":1001}`, `{"engine_run_id":"r","seq":1,"Seq":2}`, `{"engine_run_id":"r","seq":1,"\u0053EQ":2}`,
		`{"engine_run_id":"r","seq":1,"ſeq":2}`, `{"engine_run_id":"r","seq":1,"engine_run_\u0049d":"x"}`, `{"engine_run_id":"r","seq":1,"d":{"SEQ":2}}`,
		`{"engine_run_id":"a","seq":2,"d":[1,"\ud800",null]}`, `{"seq":1.0,"engine_run_id":"a"}`, `{"engine_run_id":"a","seq":2,"SEQ":1}`, `{"engine_run_id":"a","seq":2,"\u017feq":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		run, seq, reason := parseLine(b)
		scannerValid := !strings.HasPrefix(reason, "not JSON")
		if want := json.Valid(b) && utf8.Valid(b); scannerValid != want {
			t.Fatalf("%q: scanner says valid=%v (%s), encoding/json says %v", b, scannerValid, reason, want)
		}
		if reason != "" {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%q accepted, but not an object: %v", b, err)
		}
		var wantRun string
		var wantSeq int64
		if json.Unmarshal(m["engine_run_id"], &wantRun) != nil || json.Unmarshal(m["seq"], &wantSeq) != nil {
			t.Fatalf("%q accepted without a string run and an integer seq", b)
		}
		if string(run) != wantRun || seq != wantSeq {
			t.Fatalf("%q: got (%q, %d), encoding/json reads (%q, %d)", b, run, seq, wantRun, wantSeq)
		}
		checkStructKey(t, b, string(run), seq)
	})
}

// lineKey is a journal line's key as a program reads it with encoding/json.
type lineKey struct {
	Run string `json:"engine_run_id"`
	Seq int64  `json:"seq"`
}

// checkStructKey fails t unless encoding/json, decoding line into a struct tagged with the keys'
// names, reads (run, seq): the journal's key for a line it accepted.
func checkStructKey(t *testing.T, line []byte, run string, seq int64) {
	t.Helper()
	var k lineKey
	if err := json.Unmarshal(line, &k); err != nil || k.Run != run || k.Seq != seq {
		t.Fatalf("%q: the journal reads (%q, %d), encoding/json into a struct (%q, %d, %v)", line, run, seq, k.Run, k.Seq, err)
	}
}

// TestFoldsToMatchesEncodingJSONsMatchOfAMemberToAField puts every character that has a case
// folding orbit in each place of each key's name, and asks encoding/json whether it decodes the
// member into the key's field.
func TestFoldsToMatchesEncodingJSONsMatchOfAMemberToAField(t *testing.T) {
	var runes []rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.SimpleFold(r) != r {
			runes = append(runes, r)
		}
	}
	for _, key := range []string{"seq", "engine_run_id"} {
		for i := range key {
			for _, r := range runes {
				name := key[:i] + string(r) + key[i+1:]
				line, _ := json.Marshal(map[string]int{name: 7})
				var k struct {
					Run any   `json:"engine_run_id"`
					Seq int64 `json:"seq"`
				}
				json.Unmarshal(line, &k)
				matched := k.Seq == 7 || k.Run != nil
				if got := foldsTo([]byte(name), strings.ToUpper(key)); got != matched {
					t.Errorf("%q (%U): foldsTo says %v, encoding/json matched it to a field: %v", name, r, got, matched)
				}
			}
		}
	}
}

// TestPlainLenStopsAtTheFirstByteAStringBodyCannotTakeAsIs puts each kind of byte at each position of
// inputs of every length up to 80, around the 8-byte steps of the word-at-a-time scan.
func TestPlainLenStopsAtTheFirstByteAStringBodyCannotTakeAsIs(t *testing.T) {
	for n := 0; n <= 80; n++ {
		for at := 0; at <= n; at++ {
			for _, c := range []byte{'"', '\\', 0x00, 0x1f, '\n', 0x80, 0xc3, 0xff, ' ', '!', '#', '[', ']', 0x7f} {
				b := []byte(strings.Repeat("a", n))
				if at < n {
					b[at] = c
				}
				want := n
				if at < n && (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) {
					want = at
				}
				if got := plainLen(b); got != want {
					t.Fatalf("plainLen(%q) = %d, want %d", b, got, want)
				}
			}
		}
	}
}

const goodLine = `{"engine_run_id":"run-1","seq":7,"type":"spend","at":"2026-11-30T01:59:17.123456789Z","data":{"unit":3,"ok":true,"note":"x"}}`

// TestALineLikeAGoodOneIsJudgedByItsOwnBytes changes a good line at one value, or makes it stray at
// one point, and checks the verdict on what results: the parser's, Check's and Verify's after a line
// of the same form, and the parser's on the line followed by more lines, whose end it must find.
func TestALineLikeAGoodOneIsJudgedByItsOwnBytes(t *testing.T) {
	swap := func(old, new string) string { return strings.Replace(goodLine, old, new, 1) }
	const (
		notJSONOrUTF8 = "not JSON (or not UTF-8)"
		surrogate     = `"engine_run_id" holds an escape that is not a character (a lone surrogate)`
	)
	for _, tc := range []struct {
		line   string
		run    string // for a good line: its run id, decoded
		seq    int64
		reason string // for a malformed one
	}{
		{line: goodLine, run: "run-1", seq: 7},
		{line: swap(`"run-1"`, `"run-2"`), run: "run-2", seq: 7},
		{line: swap(`"run-1"`, `"r\u00e9n"`), run: "rén", seq: 7},
		{line: swap(`"run-1"`, `"\ud83d\ude00"`), run: "😀", seq: 7},  // a surrogate pair: one character
		{line: swap(`"run-1"`, `"\ud800"`), reason: surrogate},       // a lone high surrogate
		{line: swap(`"run-1"`, `"r\udfffn"`), reason: surrogate},     // a lone low surrogate
		{line: swap(`"run-1"`, `"\ud800\u0041"`), reason: surrogate}, // a high surrogate and no low one
		{line: swap(`"run-1"`, `"\udc00\ud800"`), reason: surrogate}, // the pair the wrong way round
		{line: swap(`"run-1"`, `"rün"`), run: "rün", seq: 7},
		{line: swap(`"run-1"`, `""`), reason: `"engine_run_id" is empty`},
		{line: swap(`"run-1"`, "\"r\x01n\""), reason: notJSONOrUTF8}, // a control byte
		{line: swap(`"run-1"`, "\"r\xffn\""), reason: notJSONOrUTF8}, // not UTF-8
		{line: swap(`"run-1"`, `"r\qn"`), reason: notJSONOrUTF8},     // a bad escape
		{line: swap(`"run-1"`, `"r\u12"`), reason: notJSONOrUTF8},    // a short \u
		{line: swap(`"run-1"`, `7`), reason: `"engine_run_id" is not a string`},
		{line: swap(`"seq":7`, `"seq":12345`), run: "run-1", seq: 12345},
		{line: swap(`"seq":7`, `"seq":1.5`), reason: `"seq" is not an integer`},
		{line: swap(`"seq":7`, `"seq":1e3`), reason: `"seq" is not an integer`},
		{line: swap(`"seq":7`, `"seq":0`), reason: `"seq" is below 1`},
		{line: swap(`"seq":7`, `"seq":-3`), reason: `"seq" is below 1`},
		{line: swap(`"seq":7`, `"seq":07`), reason: "not JSON"},
		{line: swap(`"seq":7`, `"seq":99999999999999999999`), reason: `"seq" is out of range`},
		{line: swap(`"seq":7`, `"seq":"7"`), reason: `"seq" is not a number`},
		{line: swap(`"unit":3`, `"unit":-0.5e-3`), run: "run-1", seq: 7},
		{line: swap(`"unit":3`, `"unit":3.`), reason: notJSONOrUTF8},
		{line: swap(`"note":"x"`, `"note":"a \"quoted\" word"`), run: "run-1", seq: 7},
		{line: swap(`"note":"x"`, `"note":"x`), reason: notJSONOrUTF8}, // unterminated
		{line: swap(`"ok":true`, `"ok":false`), run: "run-1", seq: 7},
		{line: swap(`"type"`, `"seq"`), reason: `"seq" given twice`},
		{line: goodLine + ` `, run: "run-1", seq: 7},
		{line: goodLine + `x`, reason: "not JSON (text after the object)"},
		{line: goodLine[:len(goodLine)-1], reason: "not JSON"}, // truncated
	} {
		var s scanner
		run, seq, w := s.parse([]byte(tc.line))
		if w.String() != tc.reason || tc.reason == "" && (string(run) != tc.run || seq != tc.seq) {
			t.Errorf("%s: parsed as (%q, %d, %q), want (%q, %d, %q)", tc.line, run, seq, w, tc.run, tc.seq, tc.reason)
		}
		for _, rest := range []string{"", "\n", "\n" + goodLine + "\n" + strings.Repeat("x", 64) + "\n"} {
			n, run, seq, w := s.parseNext([]byte(tc.line + rest))
			if n != len(tc.line) || w.String() != tc.reason || tc.reason == "" && (string(run) != tc.run || seq != tc.seq) {
				t.Errorf("%s + %q: parsed as (%d, %q, %d, %q)", tc.line, rest, n, run, seq, w)
			}
		}
		// Verify and Check, after a line of the same form of another run: a part of a journal, so
		// that each run may begin at the seq it has.
		before := strings.Replace(goodLine, `"run-1"`, `"run-0"`, 1)
		rep, err := Verify(strings.NewReader(before+"\n"+tc.line+"\n"), WithPartial())
		v := NewVerifier(WithPartial())
		if err := v.Check([]byte(before)); err != nil {
			t.Fatal(err)
		}
		checkErr := v.Check([]byte(tc.line))
		if tc.reason == "" {
			if err != nil || rep.Runs[tc.run].First != tc.seq || rep.Lines != 2 {
				t.Errorf("%s: Verify = (%+v, %v)", tc.line, rep, err)
			}
			if checkErr != nil || v.Report().Runs[tc.run].Last != tc.seq {
				t.Errorf("%s: Check = %v", tc.line, checkErr)
			}
			continue
		}
		for what, err := range map[string]error{"Verify": err, "Check": checkErr} {
			var ve *Error
			if !errors.Is(err, ErrMalformed) || !errors.As(err, &ve) || ve.Line != 2 || ve.Reason != tc.reason {
				t.Errorf("%s: %s = %v, want ErrMalformed at line 2: %s", tc.line, what, err, tc.reason)
			}
		}
	}
}

// TestALineCutShortAnywhereIsMalformedWhateverFollowsIt cuts a line at every byte and lets the rest
// of it follow after the newline: the cut line is refused, and what follows it is no part of it.
func TestALineCutShortAnywhereIsMalformedWhateverFollowsIt(t *testing.T) {
	full := `{"engine_run_id":"r","seq":1,"a_member_name_longer_than_24_bytes":"x","n":12}`
	for cut := range len(full) {
		in := full[:cut] + "\n" + full[cut:] + "\n"
		var s scanner
		if n, _, _, w := s.parseNext([]byte(in)); n != cut || w == whyNone {
			t.Errorf("the first %d bytes: (%d, %q), want a malformed line of %d bytes", cut, n, w, cut)
		}
		var ve *Error
		if _, err := Verify(strings.NewReader(in)); !errors.As(err, &ve) || ve.Err != ErrMalformed || ve.Line != 1 {
			t.Errorf("the first %d bytes: Verify = %v, want ErrMalformed at line 1", cut, err)
		}
	}
}

// TestAStringIsCheckedWholeWhereverItsBadByteSits puts a byte a string body cannot take, and ones it
// can, at either side of the word-at-a-time scan's steps and deep into a string of 192 KiB.
func TestAStringIsCheckedWholeWhereverItsBadByteSits(t *testing.T) {
	const long = 64 << 10
	for _, at := range []int{0, 7, 8, 9, long - 1, long, long + 1, 2*long + 5} {
		for _, tc := range []struct {
			insert string
			want   why
		}{{"", whyNone}, {"\x01", whyNotJSONOrUTF8}, {`\"`, whyNone}, {"é", whyNone}, {"\xff", whyNotJSONOrUTF8}} {
			body := strings.Repeat("x", 3*long)
			body = body[:at] + tc.insert + body[at:]
			line := `{"engine_run_id":"r","seq":2,"pad":"` + body + `"}`
			var s scanner
			n, _, seq, w := s.parseNext([]byte(line + "\n" + strings.Repeat(" ", 32)))
			if n != len(line) || w != tc.want || (w == whyNone && seq != 2) {
				t.Errorf("%q at %d: (%d, %d, %q), want (%d, 2, %q)", tc.insert, at, n, seq, w, len(line), tc.want)
			}
		}
	}
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

// BenchmarkParse: the parser on one core, line by line as Check takes them, and through a buffer of
// lines, finding each line's end first, as the File's index reads them.
func BenchmarkParse(b *testing.B) {
	lines := benchLines()
	buf := append(bytes.Join(lines, []byte("\n")), '\n')
	for _, mode := range []string{"line", "buffer"} {
		b.Run(mode, func(b *testing.B) {
			var s scanner
			for b.Loop() {
				if mode == "buffer" {
					for rest := buf; len(rest) > 0; {
						n, _, _, _ := s.parseNext(rest)
						rest = rest[n+1:]
					}
					continue
				}
				for _, l := range lines {
					s.parse(l)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(lines)), "ns/line")
		})
	}
}
