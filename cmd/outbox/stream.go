// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	ojs "github.com/textmachine/outbox/jetstream"
)

func init() {
	commands["stream"] = command{
		summary: "create a JetStream stream with the settings the relay's sink needs; trim it; list its readers",
		run:     runStream,
	}
}

const streamAbout = `
Creates the JetStream stream NAME with exactly the settings the relay's sink needs: the
subjects PREFIX.>, file storage, the limits retention policy, atomic batch publish, a
duplicate window of 2 minutes, and N replicas. A stream of that name that already has
these settings is left as it is; one with other settings is an error that says what
differs, and is not changed. The first word of the output says which: "created" or "found".

Durability of an acknowledged line: --replicas 1 survives a crash of the server process,
not a power failure of its machine (unless the server syncs always); --replicas 3 survives
the loss or the power failure of any one of three servers.`

const streamGroupAbout = `
Works on a JetStream stream the relay's sink publishes to.

  create    creates the stream with the settings the sink needs, or checks an existing one
            (outbox stream create --help; described below).
  trim      removes the lines every registered reader has applied and older than --keep, and
            past --max-bytes the oldest whatever the readers (outbox stream trim --help).
  readers   lists the readers registered for the stream; --forget removes one that is gone
            (outbox stream readers --help).`

func runStream(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// Its one subcommand names the command in every message, as "outbox inbox stats" does, once
	// it is given first; a bare or unknown subcommand is the usage error of "outbox stream".
	cmd := "stream"
	if len(args) > 0 && args[0] == "trim" {
		return runStreamTrim(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "readers" {
		return runStreamReaders(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "create" {
		cmd, args = "stream create", args[1:]
	}
	synopsis, about := "outbox stream create (--nats URL | --context NAME) --stream NAME [--replicas N] [--subject-prefix PREFIX]", streamAbout
	if cmd == "stream" {
		// The group's help (outbox stream --help, outbox help stream) names every subcommand; the
		// flags it lists are create's, which the group's own parse takes.
		synopsis += "\n       outbox stream trim (--nats URL | --context NAME) --stream NAME [--keep D] [--max-bytes N] [--every D] [--subject-prefix PREFIX]" +
			"\n       outbox stream readers (--nats URL | --context NAME) --stream NAME [--forget READER]"
		about = streamGroupAbout + "\n\ncreate (the flags below are its):\n" + strings.TrimSpace(streamAbout)
	}
	fs := newFlags(cmd, synopsis, about)
	name := fs.String("stream", "", "the stream `NAME`")
	replicas := fs.Int("replicas", 1, "the number of replicas, `N`: 1 to 5, usually 1 or 3 (3 needs a cluster of three or more servers)")
	nf := addNATSFlags(fs, "the NATS server `URL`")
	pos, code, done := parseFlags(fs, args, stderr)
	if !done && cmd == "stream" && len(pos) > 0 && pos[0] == "create" {
		cmd, pos = "stream create", pos[1:]
	}
	usage := "outbox " + cmd
	switch {
	case done:
		return code
	case cmd != "stream create":
		return usageError(stderr, usage, "need the subcommand create")
	case len(pos) > 0:
		return usageError(stderr, usage, "unexpected argument %q", pos[0])
	case !nf.chosen() || *name == "":
		return usageError(stderr, usage, "need --nats URL (or --context NAME) and --stream NAME")
	case *replicas < 1 || *replicas > 5:
		return usageError(stderr, usage, "--replicas %d: need 1 to 5", *replicas)
	case nf.problem() != "":
		return usageError(stderr, usage, "%s", nf.problem())
	}
	js, closeConn, err := nf.connect()
	if err != nil {
		return failErr(stderr, exitUsage, "stream create", err)
	}
	defer closeConn()
	// Whether it was there before: CreateStream leaves an existing stream as it is. One created by
	// someone else between the two calls is reported as created.
	verb := "created"
	if _, err := js.Stream(ctx, *name); err == nil {
		verb = "found"
	}
	st, err := ojs.CreateStream(ctx, js, *name, ojs.WithReplicas(*replicas), ojs.WithSubjectPrefix(nf.prefix))
	if err != nil {
		return failErr(stderr, exitUsage, "stream create", err)
	}
	c := st.CachedInfo().Config
	fmt.Fprintf(stdout, "%s stream %s at %s: subjects %s, file storage, %s, atomic publish, duplicate window %v\n",
		verb, c.Name, nf.server(), strings.Join(c.Subjects, " "), plural(int64(c.Replicas), "replica"), c.Duplicates)
	return exitOK
}
