// SPDX-License-Identifier: Apache-2.0

package jetstream

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// StreamPosition is where a stream source stands, as ApplyStream and FollowStream store it in the
// inbox's database with the effects of the lines before it.
type StreamPosition struct {
	// Seq is the last stream sequence read through: every message of the subject filter up to it
	// was applied.
	Seq uint64
	// Created is when the stream was created, as the server reports it. The server keeps it across
	// restarts and failovers and tells a stream created again under the same name by it (the
	// identity it gives a stream that others source from): a position taken in another stream is
	// never read on from.
	Created time.Time
	// Floor, when above Seq, is the position the source had when a Release or an AcceptGap rewound
	// it: everything of the filter up to it was applied before the rewind, so the stream is read
	// again from its start, but a message after Floor that the stream no longer holds is still a
	// retention gap. 0 once the source has read past it.
	Floor uint64
}

var errBadStreamPosition = errors.New("jetstream: not a stream source position")

// encode renders p as text, so that it reads plainly in the database: the sequence, a space, and the
// creation time in RFC 3339 with nanoseconds, in UTC; then, only when there is one, a space and the
// floor.
func (p StreamPosition) encode() []byte {
	b := strconv.FormatUint(p.Seq, 10) + " " + p.Created.UTC().Format(time.RFC3339Nano)
	if p.Floor != 0 {
		b += " " + strconv.FormatUint(p.Floor, 10)
	}
	return []byte(b)
}

// String is the position for a person.
func (p StreamPosition) String() string {
	s := fmt.Sprintf("stream sequence %d (stream created %s)", p.Seq, p.Created.UTC().Format(time.RFC3339Nano))
	if p.Floor != 0 {
		s += fmt.Sprintf(", read again after a rewind from stream sequence %d", p.Floor)
	}
	return s
}

// ParseStreamPosition decodes a position that ApplyStream or FollowStream stored (inbox.Source.Position
// of a source whose name begins as StreamSourceName begins it), with or without a floor. It refuses anything
// that is not exactly such an encoding (a floor at or below the sequence included).
func ParseStreamPosition(pos []byte) (StreamPosition, error) {
	seqText, created, ok := strings.Cut(string(pos), " ")
	if !ok {
		return StreamPosition{}, fmt.Errorf("%w: %q", errBadStreamPosition, pos)
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return StreamPosition{}, fmt.Errorf("%w: sequence %q", errBadStreamPosition, seqText)
	}
	created, floorText, hasFloor := strings.Cut(created, " ")
	t, err := time.Parse(time.RFC3339Nano, created)
	if err != nil {
		return StreamPosition{}, fmt.Errorf("%w: creation time %q", errBadStreamPosition, created)
	}
	p := StreamPosition{Seq: seq, Created: t}
	if hasFloor {
		if p.Floor, err = strconv.ParseUint(floorText, 10, 64); err != nil || p.Floor <= p.Seq {
			return StreamPosition{}, fmt.Errorf("%w: floor %q at sequence %d", errBadStreamPosition, floorText, seq)
		}
	}
	if string(p.encode()) != string(pos) {
		return StreamPosition{}, fmt.Errorf("%w: %q is not in its canonical encoding", errBadStreamPosition, pos)
	}
	return p, nil
}
