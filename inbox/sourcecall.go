// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/textmachine/outbox/internal/faultpoint"
)

// sourceCall is what one call reading a file or a journal keeps whatever it reads: the loop that
// reads lines, applies them a batch at a time and commits the position with them is the same for
// both.
type sourceCall struct {
	in     *Inbox
	name   string // the source's prefix and the absolute path
	h      Handler
	follow bool
	bounds batchBounds

	stored []byte // the position the inbox holds, exactly as stored (nil: none)
	rep    Report
}

func (in *Inbox) newSourceCall(name string, h Handler, follow bool) sourceCall {
	return sourceCall{in: in, name: name, h: h, follow: follow,
		bounds: batchBounds{lines: in.batchLines(), bytes: in.batchBytes(), maxLine: in.maxLineSize()}}
}

// sourcePath checks a call's handler and path (what says what the path names) and returns the path
// made absolute.
func sourcePath(call, what, path, prefix string, h Handler) (string, error) {
	if h == nil {
		return "", fmt.Errorf("inbox: %s with a nil handler", call)
	}
	if path == "" {
		return "", fmt.Errorf("inbox: %s with an empty %s", call, what)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("inbox: %s: %w", call, err)
	}
	if err := checkName(call+" "+what, abs, MaxSourceNameLen-len(prefix)); err != nil {
		return "", err
	}
	return abs, nil
}

// lineSource is a file or a journal source as the shared loop sees it.
type lineSource interface {
	call() *sourceCall
	// load reads the stored position and finds where to read on from it.
	load(ctx context.Context) error
	// drain applies batch after batch until no complete line is left to read.
	drain(ctx context.Context) error
	// look is the check after each wake-up of a follower.
	look(ctx context.Context) error
	// cursor returns the file being read and where reading stands in it.
	cursor() (*journalFile, FilePosition)
	// encode returns a position in the file being read as the inbox stores it.
	encode(to FilePosition) []byte
	// where names the file being read and the byte reading stands at, for an error.
	where() (string, int64)
	// committed moves reading to to once the batch before it is committed.
	committed(to FilePosition) error
}

// followSource loads s, then drains it, waits and looks again, until an error (ctx's end among them).
func followSource(ctx context.Context, s lineSource, wait func(context.Context) error) error {
	err := s.load(ctx)
	for err == nil {
		if err = s.drain(ctx); err != nil {
			break
		}
		if err = wait(ctx); err != nil {
			break
		}
		err = s.look(ctx)
	}
	return err
}

// forget gives up the position stored for the source, and the position a rewound one was rewound
// from.
func (c *sourceCall) forget(ctx context.Context) error {
	for {
		pos, from, err := c.in.SourceState(ctx, c.name)
		if err != nil || (pos == nil && from == nil) {
			return err
		}
		_, err = c.in.ApplyFrom(ctx, c.name, pos, nil, nil, c.h)
		if !errors.Is(err, ErrSourceMoved) {
			return err
		}
	}
}

// commitBatch applies lines and stores to as the position after them, in one transaction. When the
// stored position moved (a Release rewound it), it reads it again and finds where to go on from it.
func commitBatch(ctx context.Context, s lineSource, to FilePosition, lines [][]byte) error {
	c := s.call()
	enc := s.encode(to)
	rep, err := c.in.ApplyFrom(ctx, c.name, c.stored, enc, lines, c.h)
	if errors.Is(err, ErrSourceMoved) {
		return s.load(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		var le *LineError
		if errors.As(err, &le) && le.Index >= 0 && le.Index < len(lines) {
			// The lines before the malformed one are applied, so that the position stops exactly at
			// it: where an operator looks, and where the next call stops again.
			if le.Index > 0 {
				cur, pos := s.cursor()
				before, perr := cur.advance(pos, lines[:le.Index])
				if perr != nil {
					return perr
				}
				if perr := commitBatch(ctx, s, before, lines[:le.Index]); perr != nil {
					return perr
				}
				if _, pos := s.cursor(); pos != before {
					return nil // the position moved meanwhile and was read again: read on from it
				}
			}
			name, at := s.where()
			return wrapf(le, "%s, the line at byte %d", name, at)
		}
		name, at := s.where()
		return wrapf(err, "%s, the batch of %d lines from byte %d", name, len(lines), at)
	}
	c.rep.Applied += rep.Applied
	c.rep.Duplicates += rep.Duplicates
	c.rep.Stale += rep.Stale
	c.rep.Quarantined += rep.Quarantined
	c.stored = enc
	if err := s.committed(to); err != nil {
		return err
	}
	faultpoint.Hit(faultpoint.InboxBetweenBatches)
	return nil
}
