// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"encoding/json"
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
// inputs of every length up to 80, around the 8- and 16-byte steps of the word-at-a-time scans. It
// runs against the assembly on amd64 and the Go version under -tags purego.
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
