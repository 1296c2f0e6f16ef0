// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"unicode/utf8"
)

// FuzzTerminalSafeText: whatever a book or a journal holds, quote and sanitize print nothing a
// terminal acts on, and quote loses nothing: a quoted name unquotes to the original, and a name shown
// plain cannot be mistaken for a quoted one.
func FuzzTerminalSafeText(f *testing.F) {
	for _, s := range []string{"run-1", "evil\x1b[2J\a", "bad\xff", "\"quoted\"", "tab\there", "del\x7f", "bidi\u202e", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, z := quote(s), sanitize(s)
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

func TestErrorMessagesSayEachThingOnce(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("outbox: open b.db: %w", errors.New("outbox: open b.db: sqlite3: file is not a database")), "open b.db: file is not a database"},
		{fmt.Errorf("journal: line 2: %w", errors.New("journal: malformed line")), "line 2: malformed line"},
		{errors.New("run \"a\x1b\" failed"), `run "a\x1b" failed`},
	} {
		if got := message(tc.err); got != tc.want {
			t.Errorf("message(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
