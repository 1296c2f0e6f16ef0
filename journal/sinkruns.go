// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"cmp"
	"context"
	"slices"

	"github.com/textmachine/outbox/outbox"
)

// SinkRuns lists the runs the journal holds, each with its highest seq, sorted by run id: the
// outbox.RunLister a relay compares with its book at its first call. It reads what the first Append
// reads: the sealed segments' index files (and, to prove each belongs to its segment, that segment's
// last line), and the last segment; no sealed segment's lines, unless its index is missing or does not
// match it and is rebuilt. Later calls read nothing.
func (j *Journal) SinkRuns(ctx context.Context) ([]outbox.SinkRun, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return nil, err
	}
	if err := j.checkUnmodified(); err != nil {
		return nil, err
	}
	if err := j.loadIndexes(ctx); err != nil {
		return nil, err
	}
	return j.runs.sinkRuns(), nil
}

// SinkRuns lists the runs the file holds, each with its highest seq, sorted by run id (see
// Journal.SinkRuns). The first call after OpenFile reads the whole file once, as the first Append
// does; later calls read nothing.
func (j *File) SinkRuns(ctx context.Context) ([]outbox.SinkRun, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.usable(); err != nil {
		return nil, err
	}
	if err := j.checkUnmodified(); err != nil {
		return nil, err
	}
	if err := j.index(ctx); err != nil {
		return nil, err
	}
	return j.runs.sinkRuns(), nil
}

func (x *runIndex) sinkRuns() []outbox.SinkRun {
	out := make([]outbox.SinkRun, 0, len(x.runs))
	for id, rs := range x.runs {
		out = append(out, outbox.SinkRun{RunID: id, LastSeq: rs.top})
	}
	slices.SortFunc(out, func(a, b outbox.SinkRun) int { return cmp.Compare(a.RunID, b.RunID) })
	return out
}

var (
	_ outbox.RunLister = (*Journal)(nil)
	_ outbox.RunLister = (*File)(nil)
)
