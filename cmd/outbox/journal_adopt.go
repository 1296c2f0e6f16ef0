// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/textmachine/outbox/journal"
)

func init() {
	commands["journal"] = command{
		summary: "work on a segmented journal directory (adopt, status, readers, trim, accept-missing)",
		run:     runJournal,
	}
}

const journalAbout = `
Works on a journal kept as a directory of segments.

  adopt FILE DIR   ` + journalAdoptText + `
  status DIR       reports the segments, the readers and their lag, and what a trim would delete
                   and why not yet (outbox journal status --help).
  readers DIR      lists the registered readers; readers rm NAME DIR removes one that is gone
                   (outbox journal readers --help).
  trim DIR         deletes the sealed segments retention lets go, when the engine does not have
                   the journal open (outbox journal trim --help).
  accept-missing DIR
                   lets the engine start on a journal whose segments were deleted by hand,
                   saying what is gone (outbox journal accept-missing --help).`

// journalAdoptText is adopt's description, in the group's help and in its own.
const journalAdoptText = `carries the single-file journal FILE over into DIR, which must be missing or
                   empty and on FILE's file system: FILE becomes DIR's first segment
                   (00000000000000000000.jsonl), moved by a rename, so every line keeps its byte
                   position; it is read once, to write its index, and an empty segment is started
                   after it, so that a start reads the index, not the file. Stop the engine first:
                   a journal another writer has open is refused, and so is a FILE with other names
                   (hard links) or one that changes while it is adopted (a program writing to it
                   without its lock). Nothing is changed when it is refused. FILE is no longer at
                   its path afterwards: an inbox that reads it (ApplyFile, FollowFile) must be
                   moved to the directory too.`

const journalSynopsis = "outbox journal adopt FILE DIR | status DIR | readers DIR | trim DIR | accept-missing DIR"

func runJournal(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "status":
			return journalStatus(ctx, args[1:], stdout, stderr)
		case "readers":
			return journalReaders(ctx, args[1:], stdout, stderr)
		case "trim":
			return journalTrim(ctx, args[1:], stdout, stderr)
		case "accept-missing":
			return journalAcceptMissing(ctx, args[1:], stdout, stderr)
		case "adopt":
			return journalAdoptCommand(ctx, args[1:], stdout, stderr)
		}
	}
	fs := newFlags("journal", journalSynopsis, journalAbout)
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) == 0 {
		return usageError(stderr, "outbox journal", "need a subcommand: adopt FILE DIR, status DIR, readers DIR, trim DIR or accept-missing DIR")
	}
	switch pos[0] {
	case "adopt":
		if len(pos) != 3 {
			return usageError(stderr, "outbox journal", "adopt takes a file and a directory: adopt FILE DIR")
		}
		return journalAdopt(ctx, pos[1], pos[2], stdout, stderr)
	}
	return usageError(stderr, "outbox journal", "unknown subcommand %s", quote(pos[0]))
}

// journalAdoptCommand is "outbox journal adopt", with a help of its own.
func journalAdoptCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("journal adopt", "outbox journal adopt FILE DIR", refill("C"+journalAdoptText[1:], 98))
	pos, code, done := parseFlags(fs, args, stderr)
	if done {
		return code
	}
	if len(pos) != 2 {
		return usageError(stderr, "outbox journal", "adopt takes a file and a directory: adopt FILE DIR")
	}
	return journalAdopt(ctx, pos[0], pos[1], stdout, stderr)
}

func journalAdopt(ctx context.Context, file, dir string, stdout, stderr io.Writer) int {
	if err := checkFile(file, "journal"); err != nil {
		return failErr(stderr, exitUsage, "journal adopt", fmt.Errorf("%w; nothing was changed", err))
	}
	err := journal.Adopt(ctx, file, dir)
	if errors.Is(err, journal.ErrLocked) {
		return fail(stderr, exitUsage, "journal adopt: journal %s is open in another process (is the engine running?); nothing was changed", quote(file))
	}
	if err != nil {
		return failErr(stderr, exitUsage, "journal adopt", err)
	}
	fmt.Fprintf(stdout, "adopted %s as %s\n", quote(file), quote(filepath.Join(dir, "00000000000000000000.jsonl")))
	return exitOK
}

// refill joins text's words into lines of at most width bytes: a paragraph indented for a column of
// the group's help, printed on its own.
func refill(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(text) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
