// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/textmachine/outbox/inbox/db"
)

// Source is a source's stored position.
type Source struct {
	Name     string
	Position []byte // the source's own encoding; nil when rewound
	Updated  time.Time
}

// SourcePosition returns the position stored for source, nil when none is (never stored, or rewound
// by Release or AcceptGap). It reads on the read pool, never waiting for a running Apply.
func (in *Inbox) SourcePosition(ctx context.Context, source string) ([]byte, error) {
	var pos []byte
	err := in.read(ctx, func() (err error) {
		pos, err = in.q.SourceGet(ctx, in.r, source)
		if errors.Is(err, sql.ErrNoRows) {
			pos, err = nil, nil
		}
		return err
	})
	if err != nil {
		return nil, wrapf(err, "position of source %q", source)
	}
	return position(pos), nil
}

// Sources lists every stored source position, in name order (for stats and metrics).
func (in *Inbox) Sources(ctx context.Context) ([]Source, error) {
	var out []Source
	err := in.read(ctx, func() error {
		after := ""
		for {
			rows, err := in.q.SourcesAfter(ctx, in.r, db.SourcesAfterParams{After: after, MaxRows: pageRows})
			if err != nil {
				return err
			}
			for _, r := range rows {
				out = append(out, Source{Name: r.Name, Position: position(r.Position), Updated: time.Unix(0, r.UpdatedAt)})
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

// rewindSources makes every source read again from its start.
func (t *txn) rewindSources() error {
	if err := t.in.q.SourcesRewind(t.ctx, t.tx, t.now); err != nil {
		return fmt.Errorf("inbox: rewind the sources: %w", err)
	}
	return nil
}
