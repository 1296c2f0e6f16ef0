// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/internal/inboxseam"
	"github.com/textmachine/outbox/jetstream"
	"github.com/textmachine/outbox/metrics"
)

// inboxCollector returns the inbox's collector (package metrics, the one a platform registers), as
// bookCollector does the book's: a database that does not exist yet, or is still empty, answers
// outbox_inbox_up 0 until the consumer creates it.
func inboxCollector(ctx context.Context, path string, open func(context.Context) (*inbox.Inbox, error), opts ...metrics.Option) (prometheus.Collector, error) {
	if notYet(path) {
		return metrics.NewOpeningInboxCollector(open, opts...), nil
	}
	in, err := open(ctx)
	if err != nil {
		return nil, err
	}
	return metrics.NewInboxCollector(in, opts...), nil
}

// streamSeq reads a JetStream stream source's position for outbox_inbox_stream_position. The
// stream's own last sequence is the server's to export: the exporter connects to no server.
func streamSeq(s inbox.Source) (uint64, bool) {
	if !strings.HasPrefix(s.Name, inboxseam.StreamSourcePrefix) || s.Position == nil {
		return 0, false
	}
	p, err := jetstream.ParseStreamPosition(s.Position)
	if err != nil {
		return 0, false
	}
	return p.Seq, true
}
