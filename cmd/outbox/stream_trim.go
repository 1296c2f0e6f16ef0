// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	ojs "github.com/textmachine/outbox/jetstream"
)

const streamTrimAbout = `
Removes from the stream NAME the lines every registered reader has applied and that are older
than --keep. A reader registers by reading the stream (ApplyStream or FollowStream of package
jetstream, in the consumer's program): it writes the stream sequence its inbox committed to the
stream's readers' bucket after each commit. With no reader registered nothing is removed but by the cap.

With --max-bytes N, a stream that still holds more than N bytes loses its oldest lines, applied
or not, until it holds at most N: the readers left behind are logged at level ERROR and stop with
a retention gap at their next read, naming what they lost.

Each run's removed lines are recorded in the readers' bucket before they are removed, so that the
relay's sink goes on after them. With --every D the trim runs again every D until a signal; the
output says what each run did.`

// trimFlags are the flags of a trim, shared by "stream trim" and "relay --trim".
type trimFlags struct {
	keep     time.Duration
	maxBytes int64
}

func addTrimFlags(fs interface {
	DurationVar(*time.Duration, string, time.Duration, string)
	Int64Var(*int64, string, int64, string)
}) *trimFlags {
	t := &trimFlags{}
	fs.DurationVar(&t.keep, "keep", ojs.DefaultTrimKeep, "keep every line younger than `duration`, applied or not")
	fs.Int64Var(&t.maxBytes, "max-bytes", 0, "the hard cap: past `N` bytes, remove the oldest lines whether the readers applied them or not (0: none)")
	return t
}

func (t *trimFlags) problem() string {
	switch {
	case t.keep < 0:
		return fmt.Sprintf("--keep %v: need 0 or more", t.keep)
	case t.maxBytes < 0:
		return fmt.Sprintf("--max-bytes %d: need 0 or more", t.maxBytes)
	}
	return ""
}

// trimOnce runs one trim and prints what it did.
func (t *trimFlags) trimOnce(ctx context.Context, js njs.JetStream, stream, prefix string, stdout, stderr io.Writer) error {
	rep, err := ojs.Trim(ctx, js, stream, ojs.WithKeep(t.keep), ojs.WithMaxBytes(uint64(t.maxBytes)),
		ojs.WithSubjectPrefix(prefix), ojs.WithTrimLogger(slog.New(slog.NewTextHandler(stderr, nil))))
	if err != nil {
		return err
	}
	var readers []string
	for _, r := range rep.Readers {
		readers = append(readers, fmt.Sprintf("%s at %d", r.Name, r.Seq))
	}
	if len(readers) == 0 {
		readers = []string{"none registered"}
	}
	fmt.Fprintf(stdout, "trimmed stream %s: removed %s of %s; %d bytes before, %d after; readers: %s\n",
		stream, plural(int64(rep.Purged), "line"), plural(int64(rep.Runs), "run"), rep.BytesBefore, rep.BytesAfter,
		strings.Join(readers, ", "))
	if rep.Capped > 0 {
		var left []string
		for _, r := range rep.LeftBehind {
			left = append(left, fmt.Sprintf("%s at %d", r.Name, r.Seq))
		}
		fmt.Fprintf(stdout, "the cap of %d bytes removed every line below stream sequence %d; readers left behind: %s\n",
			t.maxBytes, rep.Capped, strings.Join(append(left, "none")[:max(len(left), 1)], ", "))
	}
	return nil
}

func runStreamTrim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const usage = "outbox stream trim"
	fs := newFlags("stream trim", "outbox stream trim (--nats URL | --context NAME) --stream NAME [--keep D] [--max-bytes N] [--every D] [--subject-prefix PREFIX]", streamTrimAbout)
	name := fs.String("stream", "", "the stream `NAME`")
	every := fs.Duration("every", 0, "trim again every `duration` until a signal (0: once)")
	tf := addTrimFlags(fs)
	nf := addNATSFlags(fs, "the NATS server `URL`")
	pos, code, done := parseFlags(fs, args, stderr)
	switch {
	case done:
		return code
	case len(pos) > 0:
		return usageError(stderr, usage, "unexpected argument %q", pos[0])
	case !nf.chosen() || *name == "":
		return usageError(stderr, usage, "need --nats URL (or --context NAME) and --stream NAME")
	case tf.problem() != "":
		return usageError(stderr, usage, "%s", tf.problem())
	case *every < 0:
		return usageError(stderr, usage, "--every %v: need 0 or more", *every)
	case nf.problem() != "":
		return usageError(stderr, usage, "%s", nf.problem())
	}
	js, closeConn, err := nf.connect()
	if err != nil {
		return failErr(stderr, exitUsage, "stream trim", err)
	}
	defer closeConn()
	for {
		err := tf.trimOnce(ctx, js, *name, nf.prefix, stdout, stderr)
		if *every == 0 {
			if err != nil {
				return failErr(stderr, exitUsage, "stream trim", err)
			}
			return exitOK
		}
		if err != nil && ctx.Err() == nil {
			// A trim that failed (the server away) is tried again at the next interval: what it
			// recorded before it stopped only grows.
			fmt.Fprintf(stderr, "outbox stream trim: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-time.After(*every):
		}
	}
}

const streamReadersAbout = `
Lists the readers registered with the stream NAME: each one's name, the stream sequence its inbox
has committed, its lag (the stream's last sequence less that), and when it last wrote; first the
stream's size and, when the trim's cap (--max-bytes) acted, the sequence it removed below. A reader
whose position the cap passed is marked RETENTION GAP with the sequences it lost: it stops there
until an operator accepts the loss. With
--forget READER, removes that reader's registration instead, so that the trim no longer keeps
what it has not applied (for a reader gone for good: one that reads again registers again).`

func runStreamReaders(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	const usage = "outbox stream readers"
	fs := newFlags("stream readers", "outbox stream readers (--nats URL | --context NAME) --stream NAME [--forget READER]", streamReadersAbout)
	name := fs.String("stream", "", "the stream `NAME`")
	forget := fs.String("forget", "", "remove the registration of the reader `READER`")
	nf := addNATSConnFlags(fs, "the NATS server `URL`")
	pos, code, done := parseFlags(fs, args, stderr)
	switch {
	case done:
		return code
	case len(pos) > 0:
		return usageError(stderr, usage, "unexpected argument %q", pos[0])
	case !nf.chosen() || *name == "":
		return usageError(stderr, usage, "need --nats URL (or --context NAME) and --stream NAME")
	case nf.problem() != "":
		return usageError(stderr, usage, "%s", nf.problem())
	}
	js, closeConn, err := nf.connect()
	if err != nil {
		return failErr(stderr, exitUsage, "stream readers", err)
	}
	defer closeConn()
	if *forget != "" {
		if err := ojs.ForgetReader(ctx, js, *name, *forget); err != nil {
			return failErr(stderr, exitUsage, "stream readers", err)
		}
		fmt.Fprintf(stdout, "forgot reader %s of stream %s\n", *forget, *name)
		return exitOK
	}
	st, err := ojs.Status(ctx, js, *name)
	if err != nil {
		return failErr(stderr, exitUsage, "stream readers", err)
	}
	fmt.Fprintf(stdout, "stream %s: %s, %d bytes, last sequence %d\n", st.Stream, plural(int64(st.Msgs), "message"), st.Bytes, st.LastSeq)
	if st.CappedBelow > 0 {
		fmt.Fprintf(stdout, "the cap removed every line below stream sequence %d, applied or not\n", st.CappedBelow)
	}
	for _, r := range st.Readers {
		note := ""
		if r.Earlier {
			note = " (taken in an earlier stream of this name: holds everything)"
		}
		if r.CapTook > 0 {
			note += fmt.Sprintf("\tRETENTION GAP: the cap removed sequences %d to %d before it applied them", r.Seq+1, st.CappedBelow-1)
		}
		fmt.Fprintf(stdout, "%s\tseq %d\tlag %d\twritten %s%s\n", r.Name, r.Seq, r.Lag, r.Updated.UTC().Format(time.RFC3339), note)
	}
	return exitOK
}
