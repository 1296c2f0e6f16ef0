// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"bytes"
	"context"
	"fmt"
)

// render has build render seq's line and checks it: nil when build declined. A panic of build's is
// returned as a userPanic: build may run on the committer's goroutine, which must not die of it. In a
// group (g), the builder may be refused before it runs, or its group taken over while it runs (see
// takeover.go); the call then ends with errNotBuilt or errGroupTakenOver.
func (s *Store) render(ctx context.Context, g *groupRun, call EnqueueCall, build EventBuilder) (line []byte, err error) {
	runID, seq := call.RunID, call.Seq
	if g != nil {
		// The builder and the line check are the caller's code on the committer's goroutine: one
		// that calls the store is told so (ErrCallInsideTx). The mark is set for them alone, not the
		// whole group, since a concurrent caller that finds it set pays for telling its goroutine
		// from the holder's.
		defer s.wr.Release(s.wr.Hold()) // the group may have been taken over meanwhile
		if err := g.enterBuilder(seq); err != nil {
			return nil, err
		}
	}
	line, err = callBuild(build, call)
	if g != nil {
		if err := g.leaveBuilder(); err != nil {
			return nil, err
		}
	}
	switch {
	case err != nil:
		if up, ok := err.(userPanic); ok {
			return nil, up
		}
		return nil, fmt.Errorf("build line %d of run %q: %w", seq, runID, err)
	case line == nil:
		return nil, nil
	}
	if err := s.checkLine(line); err != nil {
		return nil, fmt.Errorf("line %d of run %q: %w", seq, runID, err)
	}
	if check := s.cfg.lineCheck; check != nil {
		if err := callCheck(check, runID, seq, line); err != nil {
			if up, ok := err.(userPanic); ok {
				return nil, up
			}
			return nil, fmt.Errorf("line %d of run %q: %w: %w", seq, runID, ErrInvalidLine, err)
		}
	}
	if err := ctx.Err(); err != nil {
		// Ended while the line was rendered: store nothing rather than interrupt the insert.
		return nil, err
	}
	return line, nil
}

// userPanic carries a panic of the caller's own code (a builder, a WriteTx function) through the
// store's recovery, which turns any other panic, one inside the driver or SQLite, into an error.
type userPanic struct{ val any }

func (p userPanic) Error() string { return fmt.Sprintf("outbox: the builder panicked: %v", p.val) }

// callBuild runs a builder, turning its panic into a userPanic error. A builder from RunBuilder or
// CallBuilder asks for the call's run id (and once key) by its error, and is answered here.
func callBuild(build EventBuilder, call EnqueueCall) (line []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			line, err = nil, userPanic{v}
		}
	}()
	line, err = build(call.Seq)
	if req, ok := err.(*runRequest); ok {
		return req.build(call)
	}
	return line, err
}

// callCheck runs the store's line check, turning its panic into a userPanic error, as callBuild does.
func callCheck(check func(string, int64, []byte) error, runID string, seq int64, line []byte) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = userPanic{v}
		}
	}()
	return check(runID, seq, line)
}

// raise re-raises a builder's panic on the caller's goroutine, as the caller's own; any other error
// is returned as it is.
func raise(err error) error {
	if up, ok := err.(userPanic); ok {
		panic(up)
	}
	return err
}

// checkLine refuses a line the journal could not hold as one line, or longer than the store's limit.
func (s *Store) checkLine(line []byte) error {
	switch {
	case len(line) == 0:
		return fmt.Errorf("%w: empty", ErrInvalidLine)
	case len(line) > s.cfg.maxLine:
		return fmt.Errorf("%w: %d bytes, the limit is %d (WithMaxLineSize)", ErrInvalidLine, len(line), s.cfg.maxLine)
	case bytes.IndexByte(line, '\n') >= 0:
		return fmt.Errorf("%w: it holds a newline", ErrInvalidLine)
	}
	return nil
}
