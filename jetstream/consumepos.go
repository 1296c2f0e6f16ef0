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
}

var errBadStreamPosition = errors.New("jetstream: not a stream source position")

// encode renders p as text, so that it reads plainly in the database: the sequence, a space, and the
// creation time in RFC 3339 with nanoseconds, in UTC.
func (p StreamPosition) encode() []byte {
	return []byte(strconv.FormatUint(p.Seq, 10) + " " + p.Created.UTC().Format(time.RFC3339Nano))
}

// String is the position for a person.
func (p StreamPosition) String() string {
	return fmt.Sprintf("stream sequence %d (stream created %s)", p.Seq, p.Created.UTC().Format(time.RFC3339Nano))
}

// ParseStreamPosition decodes a position that ApplyStream or FollowStream stored (inbox.Source.Position
// of a source whose name begins with StreamSourcePrefix). It refuses anything that is not exactly
// such an encoding.
func ParseStreamPosition(pos []byte) (StreamPosition, error) {
	seqText, created, ok := strings.Cut(string(pos), " ")
	if !ok {
		return StreamPosition{}, fmt.Errorf("%w: %q", errBadStreamPosition, pos)
	}
	seq, err := strconv.ParseUint(seqText, 10, 64)
	if err != nil {
		return StreamPosition{}, fmt.Errorf("%w: sequence %q", errBadStreamPosition, seqText)
	}
	t, err := time.Parse(time.RFC3339Nano, created)
	if err != nil {
		return StreamPosition{}, fmt.Errorf("%w: creation time %q", errBadStreamPosition, created)
	}
	p := StreamPosition{Seq: seq, Created: t}
	if string(p.encode()) != string(pos) {
		return StreamPosition{}, fmt.Errorf("%w: %q is not in its canonical encoding", errBadStreamPosition, pos)
	}
	return p, nil
}
