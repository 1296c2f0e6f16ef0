// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseLine: the hand-written scanner agrees with encoding/json on what is valid JSON, and on the
// two members whenever it accepts a line.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"engine_run_id":"a","seq":1}`, `{"engine_run_id":"a\u00e9","seq":12,"d":[1,{"x":"y"},null,true,-1.5e3]}`,
		`[1,2]`, `{"a":}`, `{"seq":01}`, `"\ud800"`, `{"engine\u005frun_id":"a","seq":1}`, ` {} `, `{"a":"\x01"}`, `{"engine_run_id":"\ud800\udc00","seq":1}`, `{"engine_run_id":"\udc00","seq":1}`,
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
	})
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
