// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

func (s *streamSource) look(ctx context.Context) (start, last uint64, err error) {
	pos, from, err := s.in.SourceState(ctx, s.source)
	if err != nil {
		return 0, 0, err
	}
	s.stored = pos
	rctx, cancel := s.request(ctx)
	stream, err := s.js.Stream(rctx, s.name)
	cancel()
	if err != nil {
		return 0, 0, s.broker(err, "read its state")
	}
	s.stream = stream
	info := stream.CachedInfo()
	// A stream none of whose subjects is under the filter holds no line for it: reading it would
	// find nothing and store a position for good, so that pointing a source at the wrong stream, or
	// with the wrong prefix, would look like an idle journal. A mirror's or a sourced stream's
	// messages keep their origin's subjects, whatever its own, and are read.
	if cfg := info.Config; cfg.Mirror == nil && len(cfg.Sources) == 0 && !capturesAll(cfg.Subjects, s.cfg.prefix) {
		return 0, 0, fmt.Errorf("%w: stream %q: subjects %q do not capture %s: it is not a stream of that prefix",
			ErrStreamSettings, s.name, cfg.Subjects, s.filter)
	}
	s.created = info.Created
	st := info.State
	rctx, cancel = s.request(ctx)
	s.kv, err = readersBucket(rctx, s.js, s.name, info.Config.Replicas, true)
	if err == nil {
		s.capped, err = uintValue(rctx, s.kv, cappedKey(s.created))
	}
	cancel()
	if err != nil {
		return 0, 0, s.broker(err, "open its readers' bucket %s", ReadersBucket(s.name))
	}
	s.prev, s.front, s.floor, s.fresh = 0, false, 0, false
	rewound := pos == nil && from != nil
	if rewound {
		pos = from
	}
	if pos == nil {
		// No position: the stream is read from the first message it holds. What it no longer holds
		// is then seen on each run's own seqs: a run whose first line held is not its next is
		// quarantined. Where that is, begin settles once the reader is registered (settle).
		s.fresh = true
		return st.FirstSeq, st.LastSeq, nil
	}
	p, err := ParseStreamPosition(pos)
	if err != nil {
		return 0, 0, fmt.Errorf("%w (the position stored for stream %q)", err, s.name)
	}
	// Everything of the filter up to top was applied: the position, or the floor it reads again below.
	top := max(p.Seq, p.Floor)
	switch {
	case !p.Created.Equal(info.Created):
		if !s.cfg.acceptGap {
			return 0, 0, s.gapError(ctx, top, st.FirstSeq, true)
		}
		s.b.Logger.Warn("jetstream: retention gap accepted: the stream was created again; reading it from its start",
			"stream", s.name, "filter", s.filter, "position", top)
		return 0, st.LastSeq, nil
	case top > st.LastSeq:
		// The stream holds fewer messages than were read: it lost its last ones (one replica's power
		// failure without sync always) and gives their sequences to the next messages, which may
		// already be there, below the position. Which are new cannot be told by their sequences:
		// the stream is read again from its start, what was applied coming back as duplicates.
		s.b.Logger.Warn("jetstream: the stream ends before the stored position; reading it again from its start",
			"stream", s.name, "position", top, "last_seq", st.LastSeq)
		return 0, st.LastSeq, nil
	case s.capped > top+1 && !s.cfg.acceptGap:
		// The hard cap removed the filter's messages after the position; the stream's first
		// sequence may still be below its mark (a message outside the filter, or the cap stopped
		// between its mark and its removal): a gap, whatever the first sequence.
		return 0, 0, s.markCapGap(s.gapError(ctx, top, max(s.capped, st.FirstSeq), false), s.capped)
	case st.FirstSeq > top+1:
		if !s.cfg.acceptGap {
			return 0, 0, s.gapError(ctx, top, st.FirstSeq, false)
		}
		s.acceptedGap(top, st.FirstSeq)
		s.prev, s.front, s.fresh = st.FirstSeq-1, true, true
		return st.FirstSeq, st.LastSeq, nil
	case rewound:
		// Read again from the first message held, the position rewound from kept as the floor.
		s.front, s.floor = true, top
		return 0, st.LastSeq, nil
	}
	s.prev, s.front, s.floor = p.Seq, true, p.Floor
	return p.Seq + 1, st.LastSeq, nil
}

// checkFront reports a retention gap when the stream's first sequence now is past what was read
// (through before, or the floor): messages after it were removed before they were read.
func (s *streamSource) checkFront(ctx context.Context, before uint64) error {
	rctx, cancel := s.request(ctx)
	info, err := s.stream.Info(rctx)
	cancel()
	if err != nil {
		return s.broker(err, "read its first sequence")
	}
	read := max(before, s.floor)
	first, capped := info.State.FirstSeq, uint64(0)
	if s.kv != nil {
		rctx, cancel := s.request(ctx)
		var err error
		capped, err = uintValue(rctx, s.kv, cappedKey(s.created))
		cancel()
		if err != nil {
			return s.broker(err, "read the capped mark of %s", ReadersBucket(s.name))
		}
		first = max(first, capped)
	}
	if first > read+1 {
		if !s.cfg.acceptGap {
			return s.markCapGap(s.gapError(ctx, read, first, false), capped)
		}
		s.acceptedGap(read, first)
	}
	return nil
}

// markCapGap marks a retention gap as the cap's when the cap's mark is what it reached to.
func (s *streamSource) markCapGap(err error, capped uint64) error {
	if e, ok := err.(*RetentionGapError); ok && capped > 0 && e.FirstSeq == capped {
		e.Capped = true
	}
	return err
}

func (s *streamSource) acceptedGap(pos, first uint64) {
	s.b.Logger.Warn("jetstream: retention gap accepted: reading on from the stream's first message",
		"stream", s.name, "filter", s.filter, "position", pos, "first_seq", first)
}

// gapError is the retention gap after pos, naming the runs it may have taken whole.
func (s *streamSource) gapError(ctx context.Context, pos, first uint64, recreated bool) error {
	e := &RetentionGapError{Stream: s.name, Filter: s.filter, Position: pos, FirstSeq: first, Recreated: recreated}
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.filter))
	if err != nil {
		return e // the gap is certain; the names are what could be found
	}
	held := info.State.Subjects
	for r, err := range s.in.AllRuns(ctx) {
		if err != nil {
			break
		}
		if held[s.cfg.prefix+"."+Token(r.RunID)] > 0 {
			continue
		}
		if len(e.RunsGone) < MaxRunsNamed {
			e.RunsGone = append(e.RunsGone, r.RunID)
		} else {
			e.RunsGoneMore++
		}
	}
	return e
}
