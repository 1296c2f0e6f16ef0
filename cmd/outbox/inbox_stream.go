// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
	"github.com/textmachine/outbox/jetstream"
)

// inboxStreamPosition is a stream source's position decoded (jetstream.ApplyStream and FollowStream
// store it), and, when the command was given a server, where the stream stands beside it. Field
// names are part of `outbox inbox stats --json`.
type inboxStreamPosition struct {
	Stream string `json:"stream"`
	Filter string `json:"filter"` // the subject filter the source reads through: one position per filter
	// Seq is the last stream sequence applied (every message of the filter up to it); null for a
	// source rewound to read the stream again from its first message.
	Seq *uint64 `json:"seq"`
	// Created is when the stream the position was taken in was created; null when rewound.
	Created *time.Time `json:"created"`
	// The stream's state, read from the server (--nats or --context); null without a server, or when
	// it could not be read (the source's behind_error says why).
	LastSeq  *uint64 `json:"stream_last_seq"`
	FirstSeq *uint64 `json:"stream_first_seq"`
	// BehindSeqs is the stream's last sequence minus the position: at most the messages still to be
	// applied (other subjects' messages and deleted ones are counted too). Null when it cannot be told.
	BehindSeqs *uint64 `json:"behind_seqs"`
	// RetentionGap: the stream no longer holds the messages after the position (its first sequence is
	// above seq + 1, or it was deleted and created again: Recreated). The consumer stops there with
	// jetstream.ErrRetentionGap until an operator accepts the loss (jetstream.WithAcceptRetentionGap).
	RetentionGap bool `json:"retention_gap"`
	// CappedBelow is the stream sequence below which the trim's hard cap removed the lines, applied
	// or not (jetstream.CappedBelow); null when it never acted or was not read. A position below it
	// less one is a retention gap, whatever the stream's first sequence.
	CappedBelow *uint64 `json:"stream_capped_below"`
	Recreated   bool    `json:"recreated"`
	// ReadAgain: the stream ends before the position (it lost its last messages); the consumer reads
	// it again from its start, what it applied coming back as duplicates.
	ReadAgain bool `json:"reads_again_from_start"`
}

// errNoServer is why a stream source's lag is unknown when stats was given no server: it reads
// nothing but the database unless asked to.
var errNoServer = errors.New("no server given (--nats URL or --context NAME)")

// streamSourceRow is the row of a stream source, without the stream's state: the lag is unknown until
// streamLag fills it in.
func streamSourceRow(s inbox.Source, row inboxSourceRow) inboxSourceRow {
	stream, filter, _ := strings.Cut(strings.TrimPrefix(s.Name, inboxseam.StreamSourcePrefix), " ")
	sp := &inboxStreamPosition{Stream: stream, Filter: filter}
	if s.Position != nil {
		p, err := jetstream.ParseStreamPosition(s.Position)
		if err != nil {
			row.PositionHex = hex.EncodeToString(s.Position)
			row.BehindError = message(err)
			return row
		}
		created := p.Created.UTC()
		sp.Seq, sp.Created = &p.Seq, &created
	}
	row.Stream = sp
	row.BehindError = errNoServer.Error()
	return row
}

// streamLag reads the state of the streams that stream sources read, one look-up per stream, and
// says how far behind each source is.
type streamLag struct {
	js    njs.JetStream
	infos map[string]*njs.StreamInfo
	errs  map[string]error
	caps  map[string]uint64
}

func newStreamLag(js njs.JetStream) *streamLag {
	if h, ok := js.(hintJetStream); ok {
		// A consumer's stream that is missing is not one to create: say only that it is missing.
		js = h.JetStream
	}
	return &streamLag{js: js, infos: map[string]*njs.StreamInfo{}, errs: map[string]error{}, caps: map[string]uint64{}}
}

// fill completes the stream sources' rows with their streams' state.
func (l *streamLag) fill(ctx context.Context, rows []inboxSourceRow) {
	for i := range rows {
		if sp := rows[i].Stream; sp != nil {
			info, err := l.info(ctx, sp.Stream)
			if err != nil {
				rows[i].BehindError = fmt.Sprintf("stream %s: %s", quote(sp.Stream), message(err))
				continue
			}
			rows[i].BehindError = ""
			sp.lag(info, l.capped(ctx, sp.Stream))
		}
	}
}

func (l *streamLag) info(ctx context.Context, name string) (*njs.StreamInfo, error) {
	if info, ok := l.infos[name]; ok {
		return info, l.errs[name]
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var info *njs.StreamInfo
	st, err := l.js.Stream(rctx, name)
	if err == nil {
		info = st.CachedInfo()
	}
	l.infos[name], l.errs[name] = info, err
	return info, err
}

// capped reads the cap's mark of the stream, once; 0 when there is none or it cannot be read (the
// stream's state then says what it can).
func (l *streamLag) capped(ctx context.Context, name string) uint64 {
	if n, ok := l.caps[name]; ok {
		return n
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, _ := jetstream.CappedBelow(rctx, l.js, name)
	l.caps[name] = n
	return n
}

// lag sets what the stream's state says of the position, as jetstream's source judges it when a call
// begins.
func (sp *inboxStreamPosition) lag(info *njs.StreamInfo, capped uint64) {
	first, last := info.State.FirstSeq, info.State.LastSeq
	sp.FirstSeq, sp.LastSeq = &first, &last
	if capped > 0 {
		sp.CappedBelow = &capped
	}
	behind := func(from uint64) {
		b := uint64(0)
		if last > from {
			b = last - from
		}
		sp.BehindSeqs = &b
	}
	switch {
	case sp.Seq == nil:
		// Rewound: everything the stream holds is read again.
		behind(first - min(first, 1))
	case !sp.Created.Equal(info.Created):
		sp.RetentionGap, sp.Recreated = true, true
	case *sp.Seq > last:
		sp.ReadAgain = true
		behind(first - min(first, 1))
	default:
		// first > seq + 1, without the + 1 that wraps at the top of the uint64 range.
		sp.RetentionGap = first > 0 && first-1 > *sp.Seq || capped > 0 && capped-1 > *sp.Seq
		behind(*sp.Seq)
	}
}

// streamPositionText is a stream source's position for the table.
func streamPositionText(sp *inboxStreamPosition) string {
	if sp.Seq == nil {
		return fmt.Sprintf("stream %s (%s): none, reads again from its first message", quote(sp.Stream), quote(sp.Filter))
	}
	return fmt.Sprintf("stream %s (%s) at sequence %d", quote(sp.Stream), quote(sp.Filter), *sp.Seq)
}

// streamBehindText says how far behind a stream source is, and says a retention gap plainly.
func streamBehindText(sp *inboxStreamPosition) string {
	switch {
	case sp.Recreated:
		return "RETENTION GAP: the stream was deleted and created again since the position was stored; the consumer stops until the loss is accepted"
	case sp.RetentionGap && sp.CappedBelow != nil && *sp.CappedBelow >= *sp.FirstSeq:
		return fmt.Sprintf("RETENTION GAP: the stream's cap removed every line below sequence %d, so sequences %d to %d are gone; the consumer stops until the loss is accepted",
			*sp.CappedBelow, *sp.Seq+1, *sp.CappedBelow-1)
	case sp.RetentionGap:
		return fmt.Sprintf("RETENTION GAP: the stream's first sequence is %d, so sequences %d to %d are gone; the consumer stops until the loss is accepted",
			*sp.FirstSeq, *sp.Seq+1, *sp.FirstSeq-1)
	case sp.ReadAgain:
		return fmt.Sprintf("%d sequences: the stream ends at %d, before the position, and is read again from its start", *sp.BehindSeqs, *sp.LastSeq)
	case sp.BehindSeqs != nil:
		return fmt.Sprintf("%d sequences behind (the stream's last is %d)", *sp.BehindSeqs, *sp.LastSeq)
	}
	return "-"
}
