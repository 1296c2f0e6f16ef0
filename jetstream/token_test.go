// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"strings"
	"testing"
)

// FuzzToken: Token is reversible, its output is one subject token that nats.go carries unchanged in
// a header value, and a token it did not make is never read as a run, so two runs cannot share one.
func FuzzToken(f *testing.F) {
	for _, s := range []string{"", "a", " a", "a\r\n", "~", "~7e", "~41", "rün", "\xff", "a.b*c>", "~zz", "~4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := Token(s)
		if strings.ContainsAny(tok, " \t\r\n.*>:") {
			t.Fatalf("Token(%q) = %q: not one subject token", s, tok)
		}
		if run, ok := runOfToken(tok); s != "" && (!ok || run != s) {
			t.Fatalf("runOfToken(Token(%q)) = %q, %v", s, run, ok)
		}
		if run, ok := runOfToken(s); ok && Token(run) != s {
			t.Fatalf("runOfToken(%q) = %q, which Token writes as %q: two tokens for one run", s, run, Token(run))
		}
	})
}
