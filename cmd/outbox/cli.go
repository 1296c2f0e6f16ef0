// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/textmachine/outbox/cmd/outbox/internal/termsafe"
)

// newFlags returns the flag set of `outbox <name>`. Its usage, printed by --help, is the synopsis, the
// description, and every flag as `--name VALUE` with its meaning, the convention of every command.
// A flag's VALUE is the back-quoted word of its usage string, as with the flag package.
func newFlags(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("outbox "+name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s\n\n%s\n", synopsis, strings.TrimSpace(about))
		printFlags(w, fs)
	}
	return fs
}

// printFlags lists fs's flags as `--name VALUE`, each meaning on the next line.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	first := true
	fs.VisitAll(func(f *flag.Flag) {
		if first {
			fmt.Fprintln(w, "\nflags:")
			first = false
		}
		value, usage := flag.UnquoteUsage(f)
		if isBool(f) {
			value = ""
		}
		// The placeholder reads the same in the meaning as after the flag: "work in DIR".
		if i := strings.IndexByte(f.Usage, '`'); i >= 0 {
			if j := strings.IndexByte(f.Usage[i+1:], '`'); j >= 0 {
				usage = f.Usage[:i] + strings.ToUpper(f.Usage[i+1:i+1+j]) + f.Usage[i+2+j:]
			}
		}
		line := "  --" + f.Name
		if value != "" {
			line += " " + strings.ToUpper(value)
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s%s\n", line, usage, def)
	})
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagError rewrites the flag package's messages to the `--name` spelling the usage shows.
func flagError(err error) string {
	msg := err.Error()
	msg = strings.ReplaceAll(msg, ": -", ": --")
	msg = strings.ReplaceAll(msg, "flag -", "flag --")
	return msg
}

// streams is the standard error a command writes to; it also knows the standard output, where
// --help goes (see parseFlags), and the standard input (verify -).
type streams struct {
	io.Writer
	out io.Writer
	in  io.Reader
}

// stdinOf is the command's standard input: none for a command run without streams.
func stdinOf(stderr io.Writer) io.Reader {
	if s, ok := stderr.(*streams); ok && s.in != nil {
		return s.in
	}
	return strings.NewReader("")
}

// helpOutput is where a command's --help is printed: its standard output.
func helpOutput(stderr io.Writer) io.Writer {
	if s, ok := stderr.(*streams); ok {
		return s.out
	}
	return stderr
}

// quote shows a name taken from a book or a journal so that a terminal prints it as data
// (termsafe.Quote).
func quote(s string) string { return termsafe.Quote(s) }

func printable(s string) bool { return termsafe.Printable(s) }

// sanitize escapes, in free text such as an error message, every rune that quote would escape, and
// leaves the rest as it is; credentials in a URL are redacted first.
func sanitize(s string) string { return termsafe.Escape(redact(s)) }

// message renders err for one line of standard error, saying each thing once: the library's
// package prefix is dropped wherever a wrap repeated it, and a segment that repeats the one before it
// ("open X: open X: …") is kept once.
func message(err error) string {
	parts := strings.Split(err.Error(), ": ")
	out := parts[:0]
	for _, p := range parts {
		for _, prefix := range []string{"outbox", "inbox", "journal", "migrations", "sqlite3"} {
			if p == prefix && len(parts) > 1 {
				p = ""
			}
		}
		if p == "" || (len(out) > 0 && out[len(out)-1] == p) {
			continue
		}
		out = append(out, p)
	}
	return sanitize(strings.Join(out, ": "))
}

// checkFile refuses, before anything opens it, a path that is missing or is a directory (or, for a
// database, anything but a regular file), with a message that says which.
func checkFile(path, what string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s %s does not exist", what, quote(path))
	case err != nil:
		return fmt.Errorf("%s %s: %w", what, quote(path), errors.Unwrap(err))
	case st.IsDir():
		return fmt.Errorf("%s %s is a directory", what, quote(path))
	case what == "database" && !st.Mode().IsRegular():
		// SQLite would block on a pipe, or read a device.
		return fmt.Errorf("%s %s is not a regular file", what, quote(path))
	}
	return nil
}

// plural says n things in the number n calls for: "1 once key", "2 once keys". noun is singular and
// takes an s in the plural.
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}

// ofThem says how many of the things just counted are something: "1 of them a once key", "2 of
// them once keys".
func ofThem(n int64, one, many string) string {
	if n == 1 {
		return "1 of them " + one
	}
	return strconv.FormatInt(n, 10) + " of them " + many
}

// printJSON writes v as indented JSON in which every rune a terminal would act on or hide is
// escaped as \uXXXX. encoding/json escapes only C0 controls and U+2028/U+2029, so a run id holding a
// bidi override, an isolate or a C1 control would otherwise reach the terminal raw and reorder or
// rewrite what it shows. The escape is JSON's own, so a decoder gets the exact string back.
func printJSON(w io.Writer, v any) error {
	out, err := jsonText(v)
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// jsonText is what printJSON writes.
func jsonText(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	// Outside its strings the encoder writes ASCII only, so every rune escaped here is inside one.
	b := buf.Bytes()
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r < utf8.RuneSelf || strconv.IsPrint(r) {
			out = append(out, b[i:i+n]...)
		} else if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	return out, nil
}

// userinfo is the user information of a URL (scheme://user:password@ or scheme://token@), up to its
// last @ before a path, a space or a quote, so that an @ left unencoded in a password is covered.
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/\s"]*@`)

// redact hides the user information of every URL in s, as the server is named everywhere
// (nats://xxxxx@host:4222). A server URL given where a file, a name or a number was expected (a
// forgotten --nats, a flag misplaced) comes back in the error that names the argument, and its
// password must not come back with it.
func redact(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return userinfo.ReplaceAllString(s, "${1}xxxxx@")
}

// errWriter keeps the first error of the writes through it, so that a report printed in many
// writes can be checked once: a report that did not reach its reader is an I/O error, not a result.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
