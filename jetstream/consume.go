// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
)

// RetentionGapError says what a retention gap is: the stream, the position the inbox holds, and the
// first sequence the stream holds now. It wraps ErrRetentionGap.
type RetentionGapError struct {
	Stream, Filter string
	Position       uint64 // the last stream sequence applied (everything of the filter up to it)
	FirstSeq       uint64 // the stream's first sequence now: the messages from Position+1 to FirstSeq-1 are gone
	Recreated      bool   // the stream was deleted and created again since the position was stored
	// Capped says that Trim's hard cap removed the messages (WithMaxBytes): FirstSeq is then the
	// cap's mark, below which every line of the filter was removed, applied or not.
	Capped bool
	// RunsGone names runs the inbox has applied lines of and the stream holds no line of any more,
	// at most MaxRunsNamed of them; RunsGoneMore counts the others. Their lines after the inbox's
	// high-water mark, if they had any, went with the gap and no later line will show it: such a run
	// is lost whole. A run the inbox never saw a line of, all of whose lines were removed, cannot be
	// named by anyone.
	RunsGone     []string
	RunsGoneMore int
}

// MaxRunsNamed bounds how many runs a RetentionGapError names.
const MaxRunsNamed = 20

func (e *RetentionGapError) Error() string {
	var b strings.Builder
	if e.Recreated {
		fmt.Fprintf(&b, "jetstream: stream %q (%s) was deleted and created again since stream sequence %d was applied: "+
			"what it held after it is gone", e.Stream, e.Filter, e.Position)
	} else if e.Capped {
		fmt.Fprintf(&b, "jetstream: stream %q (%s) no longer holds the messages after stream sequence %d, the last applied: "+
			"the cap of its trim removed every line below stream sequence %d", e.Stream, e.Filter, e.Position, e.FirstSeq)
	} else {
		fmt.Fprintf(&b, "jetstream: stream %q (%s) no longer holds the messages after stream sequence %d, the last applied: "+
			"its first sequence is %d", e.Stream, e.Filter, e.Position, e.FirstSeq)
	}
	if len(e.RunsGone) > 0 {
		fmt.Fprintf(&b, "; runs applied here that it holds no line of any more, whose later lines would be lost whole: %q", e.RunsGone)
		if e.RunsGoneMore > 0 {
			fmt.Fprintf(&b, " and %d more", e.RunsGoneMore)
		}
	}
	b.WriteString(" (WithAcceptRetentionGap reads on from the first message it holds)")
	return b.String()
}

func (e *RetentionGapError) Unwrap() error { return ErrRetentionGap }

// ConsumeOption configures ApplyStream and FollowStream. WithSubjectPrefix is one too.
type ConsumeOption interface{ consumeOption(*consumeConfig) error }

type consumeConfig struct {
	prefix    string
	acceptGap bool
}

type consumeOptionFunc func(*consumeConfig) error

func (f consumeOptionFunc) consumeOption(c *consumeConfig) error { return f(c) }

// WithAcceptRetentionGap is the operator's explicit acceptance of a retention gap: instead of
// stopping with ErrRetentionGap, the call reads on from the first message the stream holds (for a
// stream created again, from its start), and logs what was given up. The lines that went with the
// gap are not skipped silently for all that: each run's next line is checked on its own (run, seq),
// and a run that lost lines is quarantined for a gap, as for any other missing line, until the
// operator releases it or accepts its gap (inbox.AcceptGap). Give it for the one call that is to
// pass the gap, not to every call: a later gap should stop the source again.
func WithAcceptRetentionGap() ConsumeOption {
	return consumeOptionFunc(func(c *consumeConfig) error { c.acceptGap = true; return nil })
}

func (p prefixOption) consumeOption(c *consumeConfig) error {
	if err := validPrefix(string(p)); err != nil {
		return err
	}
	c.prefix = string(p)
	return nil
}

// StreamSourceName is the inbox source name (inbox.Source.Name) under which ApplyStream and
// FollowStream store their position for a stream read through the subject filter <prefix>.>:
// "jetstream:", the stream's name, a space and the filter. One position per stream and filter, so
// that two consumers of one stream with other prefixes keep their own.
func StreamSourceName(stream, prefix string) string {
	return inboxseam.StreamSourcePrefix + stream + " " + prefix + ".>"
}

// ApplyStream applies the journal lines of the stream to the inbox, from the position the inbox
// holds for it to the stream's last message when the call began, then returns what it did. Each batch
// (bounded in lines and bytes by the inbox's batch options) commits its effects and the last stream
// sequence read with them in one transaction (inbox.ApplyFrom), so a crash costs at most the batch in
// flight, which is read again. See the package documentation for the rules it keeps.
//
// On an error the batches before it stand, with their position, and the Report says what they did.
// A retention gap is a *RetentionGapError wrapping ErrRetentionGap; a message that is not a journal
// line of its subject's run wraps journal.ErrMalformed and names the subject and stream sequence; an
// error of the broker (the server down, the connection lost) is returned as it is, and calling again
// goes on from the position stored. A stream whose subjects do not capture <prefix>.> (another
// stream, or another prefix; a mirror or a sourced stream is read whatever its own subjects) is
// refused with ErrStreamSettings before anything is read or stored.
func ApplyStream(ctx context.Context, js jetstream.JetStream, stream string, in *inbox.Inbox, h inbox.Handler, opts ...ConsumeOption) (inbox.Report, error) {
	s, err := newStreamSource("ApplyStream", js, stream, in, h, opts)
	if err != nil {
		return inbox.Report{}, err
	}
	err = s.apply(ctx)
	return s.rep, namedOnce(err)
}

// FollowStream applies the stream as ApplyStream does, then goes on applying what comes to it until
// ctx ends, and returns ctx.Err() with everything it applied committed. Errors of the broker (a
// server restart, a leader's failover, a connection lost) cost latency, not lines: it waits and
// reads on from the position it last committed, with a new ordered consumer. It looks at the stored
// position at the inbox's poll interval when no message comes, so that after a Release, which
// rewinds every source, it reads the stream again from its start, the position it was rewound from
// kept as the floor of its retention-gap check. It waits for a stream that does not exist yet (as
// FollowFile waits for a missing file), looking for it at the poll interval until ctx ends, so that
// a platform can be started before the engine that creates the stream; a stream deleted while it
// follows is waited for in the same way, and when it is created again the stored position reports a
// retention gap. A retention gap, a malformed message, a handler's error or an error of the inbox
// ends it as it ends ApplyStream.
func FollowStream(ctx context.Context, js jetstream.JetStream, stream string, in *inbox.Inbox, h inbox.Handler, opts ...ConsumeOption) error {
	s, err := newStreamSource("FollowStream", js, stream, in, h, opts)
	if err != nil {
		return err
	}
	err = s.follow(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return namedOnce(err)
}

// namedOnce makes err's message name one package, this one, first: the errors of the inbox and the
// journal it wraps (whose messages begin with their own package's name) keep their sentinels for
// errors.Is and errors.As, not their prefixes.
func namedOnce(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	for _, p := range []string{"inbox: ", "journal: ", "jetstream: "} {
		out = strings.ReplaceAll(out, ": "+p, ": ")
	}
	out = strings.TrimPrefix(strings.TrimPrefix(out, "inbox: "), "journal: ")
	if !strings.HasPrefix(out, "jetstream: ") {
		out = "jetstream: " + out
	}
	if out == msg {
		return err
	}
	return &renamed{out, err}
}

type renamed struct {
	msg string
	err error
}

func (e *renamed) Error() string { return e.msg }
func (e *renamed) Unwrap() error { return e.err }

func newStreamSource(call string, js jetstream.JetStream, stream string, in *inbox.Inbox, h inbox.Handler, opts []ConsumeOption) (*streamSource, error) {
	c := consumeConfig{prefix: DefaultPrefix}
	for _, o := range opts {
		if o != nil {
			if err := o.consumeOption(&c); err != nil {
				return nil, err
			}
		}
	}
	switch {
	case js == nil:
		return nil, fmt.Errorf("jetstream: %s with a nil JetStream context", call)
	case in == nil:
		return nil, fmt.Errorf("jetstream: %s with a nil inbox", call)
	case h == nil:
		return nil, fmt.Errorf("jetstream: %s with a nil handler", call)
	case !validStreamName(stream):
		return nil, fmt.Errorf("jetstream: %s: invalid stream name %q", call, stream)
	}
	b := inboxseam.SourceBounds(in)
	return &streamSource{js: js, name: stream, cfg: c, filter: c.prefix + ".>", source: StreamSourceName(stream, c.prefix),
		in: in, h: h, b: b}, nil
}

// validStreamName refuses what the server refuses in a stream name, and what would make the source
// name ambiguous or the API subject malformed.
func validStreamName(name string) bool {
	if name == "" || len(name) > 255 || !utf8.ValidString(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c == 0x7f || strings.IndexByte(".*>/\\", c) >= 0 {
			return false
		}
	}
	return true
}
