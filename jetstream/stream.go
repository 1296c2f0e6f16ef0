// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultDuplicateWindow is the duplicate window CreateStream gives a stream, the server's default.
const DefaultDuplicateWindow = 2 * time.Minute

type streamConfig struct {
	prefix     string
	replicas   int
	duplicates time.Duration
}

// StreamOption configures CreateStream. WithSubjectPrefix is one too.
type StreamOption interface{ streamOption(*streamConfig) error }

type streamOptionFunc func(*streamConfig) error

func (f streamOptionFunc) streamOption(c *streamConfig) error { return f(c) }

// WithReplicas sets the stream's number of replicas (default 1): 3 for lines that must survive the
// loss or the power failure of a server; see the package documentation.
func WithReplicas(n int) StreamOption {
	return streamOptionFunc(func(c *streamConfig) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("jetstream: %d replicas, need 1 to 5", n)
		}
		c.replicas = n
		return nil
	})
}

// WithDuplicateWindow sets how long the server remembers a Msg-Id (default DefaultDuplicateWindow).
// The sink recognises a re-delivery after the window too, by reading the line back; the window only
// saves that read.
func WithDuplicateWindow(d time.Duration) StreamOption {
	return streamOptionFunc(func(c *streamConfig) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("jetstream: duplicate window %v, need at least 100ms", d)
		}
		c.duplicates = d
		return nil
	})
}

// CreateStream creates the stream name with the settings the sink needs: the subjects <prefix>.>, file
// storage, the limits retention policy, atomic publish, the duplicate window, and the replicas asked
// for, with no limit on age, messages or bytes. A server before 2.12 has no atomic publish: the
// stream is created without it, and the sink publishes one line at a time there. If the stream exists, CreateStream changes nothing and
// returns it when it has those settings; otherwise the error wraps ErrStreamSettings and says what
// differs. Each outbox stream of an account needs a subject prefix of its own (WithSubjectPrefix):
// the server refuses a second stream over the same subjects, and the error, which wraps the server's
// (a *jetstream.APIError with the error code 10065), names the stream that holds them and says so.
//
// Limits that delete lines are refused, here and by NewSink, because a re-delivery after a crash must
// find the lines it repeats: a max age (whatever the discard policy), a max number of messages per
// subject (unless both the discard-new policy and discard new per subject are set), and a max number
// of messages or bytes under the discard-old policy (the default). Under the discard-new policy a
// full stream refuses the next line instead; it waits in the outbox, the relay retrying, until the
// operator raises the limit. A max message size and placement are the operator's to set. The way to
// bound a stream is Trim, which removes only what the registered readers applied, and which the sink
// goes on after: the stream it leaves has these same settings.
func CreateStream(ctx context.Context, js jetstream.JetStream, name string, opts ...StreamOption) (jetstream.Stream, error) {
	c := streamConfig{prefix: DefaultPrefix, replicas: 1, duplicates: DefaultDuplicateWindow}
	for _, o := range opts {
		if o != nil {
			if err := o.streamOption(&c); err != nil {
				return nil, err
			}
		}
	}
	if js == nil || !validStreamName(name) {
		return nil, fmt.Errorf("jetstream: invalid stream name %q", name)
	}
	want := jetstream.StreamConfig{
		Name: name, Subjects: []string{c.prefix + ".>"}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, Replicas: c.replicas, Duplicates: c.duplicates,
		AllowAtomicPublish: true,
	}
	stream, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = js.CreateStream(ctx, want)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			stream, err = js.Stream(ctx, name) // created meanwhile: check it like any other
		} else if errors.Is(err, errSubjectsOverlap) {
			return nil, overlapError(ctx, js, name, c.prefix, err)
		} else if err != nil {
			return nil, fmt.Errorf("jetstream: create stream %q: %w", name, err)
		} else {
			return stream, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: stream %q: %w", name, err)
	}
	have := stream.CachedInfo().Config
	problems := sinkProblems(have, config{prefix: c.prefix, minReplicas: 1})
	if have.Replicas != c.replicas {
		problems = append(problems, fmt.Sprintf("replicas %d, want %d", have.Replicas, c.replicas))
	}
	if !have.AllowAtomicPublish && atomicPublishKnown(js) {
		problems = append(problems, "atomic publish off, want on")
	}
	if have.Duplicates != c.duplicates {
		problems = append(problems, fmt.Sprintf("duplicate window %v, want %v", have.Duplicates, c.duplicates))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: stream %q exists with other settings: %s", ErrStreamSettings, name, strings.Join(problems, "; "))
	}
	return stream, nil
}

// atomicPublishKnown reports whether the server js is connected to has atomic batch publish
// (nats-server 2.12 and later). An older one drops the setting from the stream it creates, and the
// sink publishes one line at a time there: CreateStream's stream then has it off, as it must.
func atomicPublishKnown(js jetstream.JetStream) bool {
	var major, minor int
	if _, err := fmt.Sscanf(js.Conn().ConnectedServerVersion(), "%d.%d", &major, &minor); err != nil {
		return true // unknown: ask for it, as for a current server
	}
	return major > 2 || major == 2 && minor >= 12
}

// errSubjectsOverlap matches the server's refusal of a stream whose subjects overlap another's
// (JSStreamSubjectOverlapErr) by its error code, as the client's APIError compares them.
var errSubjectsOverlap = &jetstream.APIError{ErrorCode: 10065}

// overlapError explains the server's "subjects overlap" and keeps it for errors.Is: two outbox
// streams of one account with the default prefix is the usual cause, and the way out is a prefix
// of each stream's own, which the server's message cannot know to say.
func overlapError(ctx context.Context, js jetstream.JetStream, name, prefix string, err error) error {
	other := "another stream"
	if o, lerr := js.StreamNameBySubject(ctx, prefix+".x"); lerr == nil && o != "" {
		other = fmt.Sprintf("stream %q", o)
	}
	return fmt.Errorf("jetstream: create stream %q: its subjects %s.> overlap those of %s in this account; "+
		"give each outbox stream a subject prefix of its own with WithSubjectPrefix (to CreateStream, NewSink, "+
		"ApplyStream and FollowStream alike): %w", name, prefix, other, err)
}

// sinkProblems lists what in a stream's settings contradicts a sink's needs, each with what to change.
func sinkProblems(sc jetstream.StreamConfig, c config) []string {
	var p []string
	if !capturesAll(sc.Subjects, c.prefix) {
		p = append(p, fmt.Sprintf("subjects %q do not capture %s.>: add it", sc.Subjects, c.prefix))
	}
	if sc.Storage != jetstream.FileStorage {
		p = append(p, "memory storage loses acknowledged lines when the server stops: use file storage")
	}
	if sc.Retention != jetstream.LimitsPolicy {
		p = append(p, fmt.Sprintf("retention %v deletes lines once consumed, so re-deliveries cannot be checked: use the limits policy", sc.Retention))
	}
	if sc.NoAck {
		p = append(p, "no_ack is set, so publications are never acknowledged: unset it")
	}
	if sc.Sealed {
		p = append(p, "the stream is sealed: use another")
	}
	if sc.SubjectTransform != nil {
		p = append(p, "a subject transform moves lines off their run's subject: remove it")
	}
	if sc.Replicas < c.minReplicas {
		p = append(p, fmt.Sprintf("%d replicas, %d required: raise the replicas", sc.Replicas, c.minReplicas))
	}
	return append(p, deletingLimits(sc)...)
}

// deletingLimits lists the stream's limits that delete lines the sink has placed. A relay that
// crashed after a batch reached the stream and before it was recorded sends the batch again, maybe
// days later, and the sink must find each of its lines to tell a duplicate from a conflict; a run's
// next line is placed after its subject's last. A deleted line makes the first check a gap, for
// good, and a run whose lines all went starts again at seq 1, past the reader's copy.
//
// A limit under the discard-new policy deletes nothing: a full stream refuses the next line instead,
// which waits in the outbox, the relay retrying, until the limit is raised; so it is allowed. The
// per-subject limit refuses only with discard new per subject as well: under discard new alone the
// server still drops a subject's oldest line to make room for its next. A maximum age deletes lines
// whatever the policy.
func deletingLimits(sc jetstream.StreamConfig) []string {
	var p []string
	discardOld := sc.Discard != jetstream.DiscardNew
	if sc.MaxAge > 0 {
		p = append(p, fmt.Sprintf("max age %v deletes lines a re-delivery must find: remove it (0)", sc.MaxAge))
	}
	if sc.MaxMsgsPerSubject > 0 && (discardOld || !sc.DiscardNewPerSubject) {
		p = append(p, fmt.Sprintf("max messages per subject %d deletes a run's oldest lines once it has that many, "+
			"so a re-delivery cannot find them: remove it (-1), or set the discard-new policy and discard new per "+
			"subject, which refuse a run's next line instead", sc.MaxMsgsPerSubject))
	}
	if discardOld {
		if sc.MaxMsgs > 0 {
			p = append(p, fmt.Sprintf("max messages %d with the discard-old policy deletes the oldest lines once reached, "+
				"so a re-delivery cannot find them: remove it (-1), or set the discard-new policy, which refuses new "+
				"lines when the stream is full instead", sc.MaxMsgs))
		}
		if sc.MaxBytes > 0 {
			p = append(p, fmt.Sprintf("max bytes %d with the discard-old policy deletes the oldest lines once reached, "+
				"so a re-delivery cannot find them: remove it (-1), or set the discard-new policy, which refuses new "+
				"lines when the stream is full instead", sc.MaxBytes))
		}
	}
	return p
}

// capturesAll reports whether one of the subject filters matches every subject <prefix>.<token>.
func capturesAll(filters []string, prefix string) bool {
	pre := strings.Split(prefix, ".")
	for _, f := range filters {
		toks := strings.Split(f, ".")
		for i, t := range toks {
			if t == ">" {
				return true
			}
			if i < len(pre) && (t == "*" || t == pre[i]) {
				continue
			}
			if i == len(pre) && t == "*" && i == len(toks)-1 {
				return true
			}
			break
		}
	}
	return false
}
