// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/demo"
	ojs "github.com/textmachine/outbox/jetstream"
)

// platformCommand is the hidden subcommand the demo re-executes this binary with: one start of the
// platform, the journal's reader.
const platformCommand = "__demo-platform"

func init() {
	hidden[platformCommand] = command{run: runPlatform}
}

// runPlatform is one start of the platform, in the child process. After each batch it commits it
// reports "batch APPLIED DUPLICATES" on standard output. With --follow it follows its source until
// its standard input ends (the demo closes it, or the demo itself is gone), then exits 0. Its source
// is the journal directory, or with --stream the JetStream stream, on the server whose URL the demo puts
// in the environment (demoNATSURLEnv), as for the engine.
func runPlatform(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags(platformCommand, "outbox "+platformCommand+" --db FILE (--journal-dir DIR | --journal FILE|DIR | --stream NAME) [--follow]",
		"One start of the demo's platform, run by outbox demo in a child process.")
	dbPath := fs.String("db", "", "the platform's database `file`")
	jPath := fs.String("journal", "", "the journal `file`, or a segmented journal's directory")
	jDir := fs.String("journal-dir", "", "the journal's `dir`ectory, which may not exist yet")
	streamName := fs.String("stream", "", "read the JetStream stream `name` instead of the journal")
	follow := fs.Bool("follow", false, "follow the journal, or the stream, until standard input ends")
	nf := addNATSFlags(fs, "with --stream: the server's `url`")
	if _, code, done := parseFlags(fs, args, stderr); done {
		return code
	}
	if u := os.Getenv(demoNATSURLEnv); u != "" && nf.url == "" {
		nf.url = u
	}
	if *follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	cfg := demo.PlatformConfig{
		DB: *dbPath, Journal: *jPath, Follow: *follow,
		Batch: func(r inbox.Report) { fmt.Fprintf(stdout, "batch %d %d\n", r.Applied, r.Duplicates) },
	}
	if *jDir != "" {
		cfg.Journal, cfg.JournalDir = *jDir, true
	}
	if *streamName != "" {
		js, closeConn, err := nf.connect()
		if err != nil {
			return fail(stderr, exitFindings, "demo: platform: %v", err)
		}
		defer closeConn()
		cfg.Source = streamSource(js, *streamName, nf.prefix)
	}
	if err := demo.RunPlatform(ctx, cfg); err != nil {
		return fail(stderr, exitFindings, "demo: platform: %v", err)
	}
	return exitOK
}

// streamSource is the platform's source for a stream: FollowStream while the engine works, and
// ApplyStream for the final catch-up, both storing the stream position with the effects.
func streamSource(js njs.JetStream, stream, prefix string) func(context.Context, *inbox.Inbox, inbox.Handler, bool) error {
	return func(ctx context.Context, in *inbox.Inbox, h inbox.Handler, follow bool) error {
		if follow {
			return ojs.FollowStream(ctx, js, stream, in, h, ojs.WithSubjectPrefix(prefix))
		}
		_, err := ojs.ApplyStream(ctx, js, stream, in, h, ojs.WithSubjectPrefix(prefix))
		return err
	}
}

// platform runs the platform's starts for the demo and kills them with SIGKILL once they have
// applied, all starts together, each of killAt lines.
type platform struct {
	exe, dbPath string
	// source is the start's arguments naming what it reads (--journal FILE, or --stream NAME and the
	// connection flags); env is added to its environment (the server's URL, never on its command line).
	source, env []string
	stderr      io.Writer
	killAt      []int                         // increasing
	say         func(format string, a ...any) // prints a line of the demo's (nil: none)

	// applied and duplicates add up what the starts reported. A start killed after a commit and
	// before it printed that batch's report leaves the batch out, so they can fall short, never
	// exceed what was committed: a report is printed only after its batch's commit returned, and
	// each is read once, also after the kill.
	applied, duplicates int
	restarts            int
}

// platformKills draws the moments of the platform's kills from the seed: distinct counts of lines
// applied, inside the journal's first 2 × units lines (it holds at least as many).
func platformKills(seed uint64, units, crashes int) []int {
	rng := rand.New(rand.NewPCG(seed, 0x706c6174666f726d))
	at := rng.Perm(2*units - 1)[:crashes]
	for i := range at {
		at[i]++
	}
	slices.Sort(at)
	return at
}

// follow runs starts that follow the journal while the engine works, restarting each killed one,
// until engineDone is closed; the start then running is stopped by closing its standard input.
func (p *platform) follow(ctx context.Context, engineDone <-chan struct{}) error {
	for {
		killed, err := p.start(ctx, engineDone)
		if err != nil || !killed {
			return err
		}
	}
}

// catchUp runs starts that apply the journal to its end, each killed when it reaches a kill left,
// until one finishes.
func (p *platform) catchUp(ctx context.Context) error {
	for {
		killed, err := p.start(ctx, nil)
		if err != nil || !killed {
			return err
		}
	}
}

// start runs one start, following the journal until stop is closed when stop is not nil, and
// reports whether it was killed.
func (p *platform) start(ctx context.Context, stop <-chan struct{}) (bool, error) {
	args := append([]string{platformCommand, "--db", p.dbPath}, p.source...)
	if stop != nil {
		args = append(args, "--follow")
	}
	cmd := exec.CommandContext(ctx, p.exe, args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, err
	}
	var in io.WriteCloser
	if stop != nil {
		if in, err = cmd.StdinPipe(); err != nil {
			return false, err
		}
	}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	exited := make(chan struct{})
	defer close(exited)
	if stop != nil {
		go func() {
			select {
			case <-stop:
				in.Close()
			case <-exited:
			}
		}()
	}
	// The reports go on being read after the kill, to the end of the pipe: a batch the start
	// committed and reported before the signal landed is counted too.
	sc := bufio.NewScanner(out)
	signalled := false
	for sc.Scan() {
		var applied, dups int
		if n, _ := fmt.Sscanf(sc.Text(), "batch %d %d", &applied, &dups); n != 2 {
			continue
		}
		p.applied += applied
		p.duplicates += dups
		if !signalled && len(p.killAt) > 0 && p.applied >= p.killAt[0] {
			for len(p.killAt) > 0 && p.killAt[0] <= p.applied {
				p.killAt = p.killAt[1:]
			}
			cmd.Process.Signal(syscall.SIGKILL)
			signalled = true
		}
	}
	io.Copy(io.Discard, out)
	err = cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return false, nil
	case errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
		p.restarts++
		if p.say != nil {
			p.say("platform start %d: killed with SIGKILL after %d lines applied by its starts in all\n", p.restarts, p.applied)
		}
		return true, nil
	}
	return false, fmt.Errorf("platform: %w", err)
}

// platformLine is the demo's line about the platform.
func platformLine(res demo.PlatformResult, units int, p *platform) string {
	return fmt.Sprintf("platform: units %d of %d, spend %d cents, duplicates skipped %d, restarts %d",
		res.Units, units, res.Spend, p.duplicates, p.restarts)
}

// problems joins the problems of both checks.
func problems(book demo.Result, plat demo.PlatformResult) string {
	return strings.Join(append(book.Problems(), plat.Problems()...), "; ")
}
