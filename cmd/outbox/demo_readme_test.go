// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README shows the demo's output as it is printed: every line of the README's block is a line
// the demo prints, in the same order, and every line the demo prints is in the block, the figures
// that vary from run to run (numbers, the directory) aside, and where the block says "…" (lines left
// out there, at least one). Only the platform's kill lines may differ in number, since the platform
// may finish before a kill point.
func TestTheREADMEShowsWhatTheDemoPrints(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const lead = "checks the journal against the book and the platform's database against both, and prints:\n\n```\n"
	i := strings.Index(string(b), lead)
	if i < 0 {
		t.Fatal("the README's demo block is not where the test looks")
	}
	block, _, _ := strings.Cut(string(b)[i+len(lead):], "```")
	dir := filepath.Join(t.TempDir(), "demo")
	code, out, errOut := cli(t, "demo", "--dir", dir)
	if code != exitOK {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
	readmeDir := regexp.MustCompile(`/tmp/outbox-demo-[0-9]+`)
	digits := regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
	reader := regexp.MustCompile(`reader inbox-\S+`)
	took := regexp.MustCompile(`^time +\S+$`)
	shape := func(text string, dirs *regexp.Regexp) []string {
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
			l = dirs.ReplaceAllString(l, "DIR")
			l = reader.ReplaceAllString(l, "reader NAME")
			l = took.ReplaceAllString(l, "time TOOK")
			l = digits.ReplaceAllString(l, "N")
			if strings.HasPrefix(l, "platform start N: killed") {
				continue
			}
			lines = append(lines, l)
		}
		return lines
	}
	want := shape(block, readmeDir)
	got := shape(out+errOut, regexp.MustCompile(regexp.QuoteMeta(dir)))
	if !matchElided(want, got) {
		t.Errorf("the README's demo block:\n%s\n\nthe demo prints:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
}

// matchElided tells whether got is want with each "…" line of want standing for one or more lines.
func matchElided(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "…" {
		for n := 1; n <= len(got); n++ {
			if matchElided(want[1:], got[n:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && want[0] == got[0] && matchElided(want[1:], got[1:])
}

func TestAnElidedLineOfTheREADMEsDemoBlockStandsForOneOrMoreLines(t *testing.T) {
	for _, c := range []struct {
		want, got []string
		ok        bool
	}{
		{[]string{"a", "…", "d"}, []string{"a", "b", "c", "d"}, true},
		{[]string{"a", "…", "d"}, []string{"a", "d"}, false},
		{[]string{"a", "…", "d"}, []string{"a", "b", "c"}, false},
		{[]string{"a", "b"}, []string{"a", "b", "c"}, false},
		{[]string{"a", "b"}, []string{"a", "c"}, false},
		{[]string{"a", "b"}, []string{"a", "b"}, true},
	} {
		if got := matchElided(c.want, c.got); got != c.ok {
			t.Errorf("%q against %q: %v, want %v", c.want, c.got, got, c.ok)
		}
	}
}
