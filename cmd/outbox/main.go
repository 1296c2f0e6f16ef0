// SPDX-License-Identifier: Apache-2.0

// Command outbox operates a book's outbox database and journal: migrations, inspection, relaying and
// verification. Run `outbox help` for the commands.
//
// Exit status: 0 on success, 1 when a check finds a problem (a journal gap, conflict or malformed line),
// 2 on a usage or I/O error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

const (
	exitOK       = 0
	exitFindings = 1
	exitUsage    = 2
)

// command is one subcommand. run returns the exit status; it prints its own errors to stderr.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

// hidden commands are not listed by help: the demo's engine child.
var hidden = map[string]command{}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprintln(stderr, "outbox: need a command (run 'outbox help' for the list)")
		return exitUsage
	case args[0] == "help" && len(args) > 1:
		// "outbox help stats" is "outbox stats --help", as in the go command, and "outbox help
		// journal trim" is "outbox journal trim --help"; an unknown name falls through to the
		// unknown-command error below.
		if _, ok := commands[args[1]]; ok {
			args = append(append([]string(nil), args[1:]...), "--help")
		} else {
			args = args[1:]
		}
	case args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help":
		usage(stdout)
		return exitOK
	case args[0] == "--version" || args[0] == "-version":
		args[0] = "version"
	}
	c, ok := commands[args[0]]
	if !ok {
		c, ok = hidden[args[0]]
	}
	if !ok {
		fmt.Fprintf(stderr, "outbox: unknown command %s (run 'outbox help')\n", redact(quote(args[0])))
		return exitUsage
	}
	return c.run(ctx, args[1:], stdout, &streams{Writer: stderr, out: stdout, in: os.Stdin})
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: outbox <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'outbox <command> --help' for a command's flags.")
}

// parseFlags parses args with fs, letting flags and positional arguments come in any order
// (`migrate up --db f` as well as `migrate --db f up`). It reports the positional arguments, or the
// exit status to return when parsing ended the command: --help prints the usage on standard output
// and succeeds; a bad flag is one line on stderr.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (positional []string, exit int, done bool) {
	fs.SetOutput(io.Discard)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(helpOutput(stderr))
				fs.Usage()
				return nil, exitOK, true
			}
			return nil, usageError(stderr, fs.Name(), "%s", flagError(err)), true
		}
		args = fs.Args()
		if len(args) == 0 {
			fs.SetOutput(stderr)
			return positional, 0, false
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// usageError prints one line naming the problem and where the usage is, and returns exitUsage.
func usageError(stderr io.Writer, name, format string, a ...any) int {
	fmt.Fprintf(stderr, "%s: %s (run '%s --help')\n", name, sanitize(fmt.Sprintf(format, a...)), name)
	return exitUsage
}

// fail prints one line to stderr and returns status. The message starts with the command's name
// ("relay: ..."), so that the line reads "outbox relay: ...", as failErr's and usageError's do.
func fail(stderr io.Writer, status int, format string, a ...any) int {
	fmt.Fprintf(stderr, "outbox %s\n", sanitize(fmt.Sprintf(format, a...)))
	return status
}

// failErr prints err as the one line of command name's failure (see message) and returns status.
func failErr(stderr io.Writer, status int, name string, err error) int {
	fmt.Fprintf(stderr, "outbox %s: %s\n", name, message(err))
	return status
}
