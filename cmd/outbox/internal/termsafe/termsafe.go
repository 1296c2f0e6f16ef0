// SPDX-License-Identifier: Apache-2.0

// Package termsafe shows text taken from a book or a journal on a terminal as data: nothing in it
// is a control byte, a formatting rune or invalid UTF-8 that the terminal would act on or hide.
//
// It is a package of its own, importing only the standard library, so that its fuzz target's test
// binary is small: the fuzzer instruments every package a fuzzed test binary holds, and the
// command's holds the whole engine, the NATS client and server and the Prometheus client.
package termsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Quote shows a run id, a once key or any other name taken from a book or a journal so that a
// terminal prints it as data: as it is when every rune is printable, otherwise (control bytes,
// DEL, invalid UTF-8, formatting runes) quoted and escaped as Go's %q does. A name that itself begins
// with a quote is quoted too, so that no plain name reads as an escaped one.
func Quote(s string) string {
	if Printable(s) && !strings.HasPrefix(s, `"`) {
		return s
	}
	return strconv.Quote(s)
}

// Printable reports whether s is valid UTF-8 of runes strconv.IsPrint accepts.
func Printable(s string) bool {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return false
			}
		}
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// Escape escapes, in free text such as an error message, every rune that Quote would escape, and
// leaves the rest as it is.
func Escape(s string) string {
	if Printable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !strconv.IsPrint(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
