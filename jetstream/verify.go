// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/journal"
)

// Verify reads the stream streamName from its first message to the last one it holds when the call
// begins, in stream order, and checks the lines with the journal's rules: the same Report, and the
// same errors (*journal.Error wrapping journal.ErrStreamGap, journal.ErrPayloadConflict or
// journal.ErrMalformed) as journal.Verify on a file, the message's position in the stream standing for
// the line number. A stream has no torn tail. Two things a file cannot hold are malformed too, with
// the subject and stream sequence named: a message holding a newline (written out by WriteLines it
// would be two lines), and a message whose engine_run_id is not the run its subject's last token
// encodes (Token), which the sink never publishes. With WithSubjectPrefix, a message whose subject is
// not <prefix>.<token> is malformed as well (it is not a line a sink with that prefix placed), and a
// stream whose subjects do not capture <prefix>.> is refused before reading (ErrStreamSettings).
// Another option is ignored.
func Verify(ctx context.Context, js jetstream.JetStream, streamName string, opts ...Option) (journal.Report, error) {
	var cfg config
	for _, o := range opts {
		if p, ok := o.(prefixOption); ok {
			if err := p.sinkOption(&cfg); err != nil {
				return journal.Report{}, err
			}
		}
	}
	if cfg.prefix != "" {
		stream, err := js.Stream(ctx, streamName)
		if err != nil {
			return journal.Report{}, fmt.Errorf("jetstream: stream %q: %w", streamName, err)
		}
		if sub := stream.CachedInfo().Config.Subjects; !capturesAll(sub, cfg.prefix) {
			return journal.Report{}, fmt.Errorf("%w: stream %q: subjects %q do not capture %s.>: it is not a stream of that prefix",
				ErrStreamSettings, streamName, sub, cfg.prefix)
		}
	}
	v := journal.NewVerifier()
	err := readStream(ctx, js, streamName, func(m streamMsg) error {
		if err := m.check(cfg.prefix); err != nil {
			return err
		}
		return v.Check(m.data)
	})
	return v.Report(), err
}

// WriteLines writes the stream's messages, in stream order, as journal lines (each followed by a
// newline) to w, up to the last message the stream holds when the call begins. It returns how many
// it wrote. A stream read this way is a journal file: journal.Verify and the outbox command read it.
// It stops, with Verify's error, at a message that would not be one line or is not its subject's run's.
func WriteLines(ctx context.Context, js jetstream.JetStream, streamName string, w io.Writer) (int, error) {
	bw := bufio.NewWriter(w)
	n := 0
	err := readStream(ctx, js, streamName, func(m streamMsg) error {
		if err := m.check(""); err != nil {
			return err
		}
		n++
		bw.Write(m.data)
		return bw.WriteByte('\n')
	})
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return n, err
}

// streamMsg is one message of a stream read in order: its position in the read (1-based), subject,
// stream sequence and data.
type streamMsg struct {
	n         int
	subject   string
	streamSeq uint64
	data      []byte
}

// check applies what a stream adds to the journal's rules, and the subject prefix when it is not "";
// a line that is not a journal line at all is left to the Verifier, which names what is wrong with it.
func (m streamMsg) check(prefix string) error {
	bad := func(run string, seq int64, format string, a ...any) error {
		return &journal.Error{Line: m.n, Run: run, Seq: seq, Err: journal.ErrMalformed,
			Reason: fmt.Sprintf("subject %s, stream sequence %d: ", m.subject, m.streamSeq) + fmt.Sprintf(format, a...)}
	}
	if bytes.IndexByte(m.data, '\n') >= 0 {
		return bad("", 0, "the message holds a newline")
	}
	if tok, ok := strings.CutPrefix(m.subject, prefix+"."); prefix != "" && (!ok || strings.Contains(tok, ".")) {
		return bad("", 0, "the subject is not %s.<run>", prefix)
	}
	run, seq, err := journal.LineKey(m.data)
	if err != nil {
		return nil
	}
	subjRun, ok := runOfToken(m.subject[strings.LastIndexByte(m.subject, '.')+1:])
	if !ok || subjRun != run {
		return bad(run, seq, "engine_run_id %q is not the subject's run", run)
	}
	return nil
}

// readStream calls fn with every message of the stream, in order, up to its last message at the start.
func readStream(ctx context.Context, js jetstream.JetStream, streamName string, fn func(streamMsg) error) error {
	stream, err := js.Stream(ctx, streamName)
	if err != nil {
		return fmt.Errorf("jetstream: stream %q: %w", streamName, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("jetstream: stream %q: %w", streamName, err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil
	}
	n := 0
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
	}
	for {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
		}
		got := 0
		for msg := range batch.Messages() {
			got++
			meta, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
			}
			if meta.Sequence.Stream > last {
				return nil
			}
			n++
			if err := fn(streamMsg{n: n, subject: msg.Subject(), streamSeq: meta.Sequence.Stream, data: msg.Data()}); err != nil {
				return err
			}
			if meta.Sequence.Stream == last {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return fmt.Errorf("jetstream: read stream %q: %w", streamName, err)
		}
		if got == 0 {
			return fmt.Errorf("jetstream: read stream %q: no message before sequence %d arrived", streamName, last)
		}
	}
}
