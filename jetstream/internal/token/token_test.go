// SPDX-License-Identifier: Apache-2.0

package token

import (
	"strings"
	"testing"
)

// FuzzToken: Encode is reversible, its output is one subject token that nats.go carries unchanged
// in a header value, and a token it did not make is never read as a run, so two runs cannot share
// one. The sink's Token is Encode.
func FuzzToken(f *testing.F) {
	for _, s := range []string{"", "a", " a", "a\r\n", "~", "~7e", "~41", "rün", "\xff", "a.b*c>", "~zz", "~4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := Encode(s)
		if strings.ContainsAny(tok, " \t\r\n.*>:") {
			t.Fatalf("Encode(%q) = %q: not one subject token", s, tok)
		}
		if run, ok := Decode(tok); s != "" && (!ok || run != s) {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", s, run, ok)
		}
		if run, ok := Decode(s); ok && Encode(run) != s {
			t.Fatalf("Decode(%q) = %q, which Encode writes as %q: two tokens for one run", s, run, Encode(run))
		}
	})
}
