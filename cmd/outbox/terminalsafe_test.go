// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strconv"
	"testing"
	"unicode/utf8"
)

// Run ids a terminal obeys without a control byte in them: a bidi override that reorders what
// follows, an isolate, a zero-width space, and a C1 control (U+009B is CSI on terminals that take
// 8-bit controls).
const (
	bidiRun = "bidi\u202egnp.exe"
	c1Run   = "c1\u009b2Jcsi"
)

// checkNothingATerminalActsOn fails when out holds a rune a terminal would act on or hide: any
// rune but newline that strconv.IsPrint refuses (control bytes, DEL, C1 controls, bidi overrides
// and isolates, zero-width and other formatting runes), or invalid UTF-8.
func checkNothingATerminalActsOn(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: invalid UTF-8 in %q", what, out)
		return
	}
	for _, r := range out {
		if r != '\n' && !strconv.IsPrint(r) {
			t.Errorf("%s: raw %U in %q", what, r, out)
			return
		}
	}
}

// checkTerminalSafe fails when out holds a byte that a terminal would act on: a control byte other
// than newline, DEL, or invalid UTF-8.
func checkTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: invalid UTF-8 in %q", what, out)
	}
	for _, r := range out {
		if (r < 0x20 && r != '\n') || r == 0x7f {
			t.Errorf("%s: raw control character %U in %q", what, r, out)
			return
		}
	}
}
