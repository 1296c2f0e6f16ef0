// SPDX-License-Identifier: Apache-2.0

package termsafe

import (
	"strconv"
	"testing"
	"unicode/utf8"
)

// FuzzTerminalSafeText: whatever a book or a journal holds, Quote and Escape print nothing a
// terminal acts on, and Quote loses nothing: a quoted name unquotes to the original, and a name shown
// plain cannot be mistaken for a quoted one. The command's sanitize is Escape of its redacted
// input, so what holds of Escape for every input holds of it.
func FuzzTerminalSafeText(f *testing.F) {
	for _, s := range []string{"run-1", "evil\x1b[2J\a", "bad\xff", "\"quoted\"", "tab\there", "del\x7f", "bidi\u202e", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, z := Quote(s), Escape(s)
		for _, out := range []string{q, z} {
			if !utf8.ValidString(out) {
				t.Fatalf("%q: output %q is not UTF-8", s, out)
			}
			for _, r := range out {
				if !strconv.IsPrint(r) {
					t.Fatalf("%q: output %q holds %U", s, out, r)
				}
			}
		}
		if q == s {
			if len(s) > 0 && s[0] == '"' {
				t.Fatalf("%q shown plain though it starts with a quote", s)
			}
			return
		}
		if back, err := strconv.Unquote(q); err != nil || back != s {
			t.Fatalf("%q: quoted as %q, which unquotes to %q (%v)", s, q, back, err)
		}
	})
}
