// SPDX-License-Identifier: Apache-2.0

// Package docs_test checks the repository's Markdown: the README is a way in that points into
// docs/, and a link that no longer resolves after text moves is a dead end for the reader.
package docs_test

import (
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// The repository's root, one level above this package's directory.
const root = ".."

// markdownFiles lists the Markdown files the checks read: the root's and docs/'s.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"*.md", "docs/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 2 {
		t.Fatalf("found %d Markdown files under %s, want the README and docs/", len(files), root)
	}
	return files
}

// outsideCode returns the file's lines that are not inside a fenced code block, with inline code
// spans blanked, so that neither is read as a link or a heading.
func outsideCode(text string) []string {
	var lines []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			lines = append(lines, "")
			continue
		}
		if fenced {
			lines = append(lines, "")
			continue
		}
		lines = append(lines, line)
	}
	return lines
}

var (
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	inlineLink = regexp.MustCompile(`\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)\)`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// anchors returns the fragment identifiers GitHub gives the headings of a Markdown text: the
// heading's text without its formatting, lower-cased, with every character but letters, digits,
// spaces, hyphens and underscores dropped and each space a hyphen; a repeated one gets -1, -2, ….
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, line := range outsideCode(text) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		title := inlineLink.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func TestEveryRelativeLinkInTheMarkdownNamesAFileThatExistsAndAHeadingItHas(t *testing.T) {
	files := markdownFiles(t)
	headings := map[string]map[string]bool{}
	headingsOf := func(path string) map[string]bool {
		if h, ok := headings[path]; ok {
			return h
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		headings[path] = anchors(string(b))
		return headings[path]
	}
	links := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range outsideCode(string(b)) {
			// A code span may hold brackets and parentheses that are not a link.
			line = codeSpan.ReplaceAllStringFunc(line, func(s string) string {
				if strings.HasPrefix(s, "`[") || strings.Contains(s, "](") {
					return strings.Repeat(" ", len(s))
				}
				return s
			})
			for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
				target := m[2]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				where := file + ":" + strconv.Itoa(i+1)
				path, fragment, _ := strings.Cut(target, "#")
				resolved := file
				if path != "" {
					resolved = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
					if _, err := os.Stat(resolved); err != nil {
						t.Errorf("%s: the link %q names %s, which does not exist", where, target, resolved)
						continue
					}
				}
				if fragment == "" {
					continue
				}
				if !strings.HasSuffix(resolved, ".md") {
					t.Errorf("%s: the link %q has a fragment into a file that is not Markdown", where, target)
					continue
				}
				if !headingsOf(resolved)[fragment] {
					t.Errorf("%s: the link %q names a heading %s does not have", where, target, resolved)
				}
			}
		}
	}
	if links == 0 {
		t.Fatal("found no relative link at all: the check reads nothing")
	}
}

// The README's programs are meant to be copied whole: each Go block is a complete file, formatted
// as gofmt formats it, with no elided part. (examples/ holds the programs that are built and run.)
func TestTheREADMEsGoBlocksAreCompleteFormattedFiles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) == 0 {
		t.Fatal("the README holds no Go block")
	}
	for i, m := range blocks {
		src := m[1]
		if !strings.HasPrefix(src, "package ") {
			t.Errorf("Go block %d does not begin with a package clause: it is not a whole file", i+1)
		}
		formatted, err := format.Source([]byte(src))
		if err != nil {
			t.Errorf("Go block %d does not parse: %v", i+1, err)
			continue
		}
		if string(formatted) != src {
			t.Errorf("Go block %d is not formatted as gofmt formats it", i+1)
		}
	}
}
