// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/textmachine/outbox/inbox/internal/db"
)

// Source is a source's stored position.
type Source struct {
	Name     string
	Position []byte // the source's own encoding; nil when rewound
	// RewoundFrom is, for a source rewound by Release or AcceptGap that has stored no position
	// since, the position it had then (nil otherwise): what it reads again from its start still goes
	// on through everything that position had not reached.
	RewoundFrom []byte
	Updated     time.Time
}

// SourcePosition returns the position stored for source, nil when none is (never stored, or rewound
// by Release or AcceptGap). It reads on the read pool, never waiting for a running Apply.
func (in *Inbox) SourcePosition(ctx context.Context, source string) ([]byte, error) {
	pos, _, err := in.SourceState(ctx, source)
	return pos, err
}

// SourceState is how a source reads where to start (the file source, the stream source, or a
// program's own source built on ApplyFrom, which must honour a rewind as they do): the position stored
// for source (as SourcePosition returns it, nil when none is or when it was rewound) and, for a
// source that Release or AcceptGap rewound and that has stored no position since, the position it
// had when it was rewound (nil otherwise). A rewound source reads again from its start, then goes on
// through everything the position it was rewound from still needed: the file source reads to its
// end the file that position named (or stops with ErrFileLost), and the stream source keeps it as
// the floor of its retention-gap check. Both are read in one snapshot, on the read pool. The first
// position a source stores with ApplyFrom (from nil) ends the rewind.
func (in *Inbox) SourceState(ctx context.Context, source string) (pos, rewoundFrom []byte, err error) {
	err = in.read(ctx, func() error {
		var r db.SourceGetRow
		var err error
		if in.unmarked {
			r.Position, err = in.q.SourceGetUnmarked(ctx, in.r, source)
		} else {
			r, err = in.q.SourceGet(ctx, in.r, source)
		}
		if errors.Is(err, sql.ErrNoRows) {
			pos, rewoundFrom = nil, nil
			return nil
		}
		if err != nil {
			return err
		}
		pos, rewoundFrom = sourceState(r.Position, r.Rewound)
		return nil
	})
	if err != nil {
		return nil, nil, wrapf(err, "position of source %q", source)
	}
	return pos, rewoundFrom, nil
}

// sourceState splits a stored row into the position a source reads on from and the one it was
// rewound from.
func sourceState(stored []byte, rewound int64) (pos, rewoundFrom []byte) {
	if rewound != 0 {
		return nil, position(stored)
	}
	return position(stored), nil
}

// Sources lists every stored source position, in name order (for stats and metrics).
func (in *Inbox) Sources(ctx context.Context) ([]Source, error) {
	var out []Source
	err := in.read(ctx, func() error {
		after := ""
		for {
			rows, err := in.sourcesAfter(ctx, after)
			if err != nil {
				return err
			}
			for _, r := range rows {
				pos, from := sourceState(r.Position, r.Rewound)
				out = append(out, Source{Name: r.Name, Position: pos, RewoundFrom: from, Updated: time.Unix(0, r.UpdatedAt)})
			}
			if len(rows) < pageRows {
				return nil
			}
			after = rows[len(rows)-1].Name
		}
	})
	if err != nil {
		return nil, wrapf(err, "list the sources")
	}
	return out, nil
}

// rewindSources makes every source read again from its start, keeping the position each had as the
// one it was rewound from.
func (t *txn) rewindSources() error {
	if err := t.in.q.SourcesRewind(t.ctx, t.tx, t.now); err != nil {
		return fmt.Errorf("inbox: rewind the sources: %w", err)
	}
	return nil
}

// sourcesAfter is a page of SourcesAfter, on a database of an earlier release too.
func (in *Inbox) sourcesAfter(ctx context.Context, after string) ([]db.SourcesAfterRow, error) {
	p := db.SourcesAfterParams{After: after, MaxRows: pageRows}
	if !in.unmarked {
		return in.q.SourcesAfter(ctx, in.r, p)
	}
	rows, err := in.q.SourcesAfterUnmarked(ctx, in.r, db.SourcesAfterUnmarkedParams(p))
	out := make([]db.SourcesAfterRow, len(rows))
	for i, r := range rows {
		out[i] = db.SourcesAfterRow{Name: r.Name, Position: r.Position, UpdatedAt: r.UpdatedAt}
	}
	return out, err
}
