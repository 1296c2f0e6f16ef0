// SPDX-License-Identifier: Apache-2.0

package jetstream_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/textmachine/outbox/inbox"
	"github.com/textmachine/outbox/jetstream"
)

// TestAStreamsRetentionGapAndAJournalsAreOneErrorToErrorsIs: a platform that reads a stream and a
// segmented journal branches on one retention gap, whichever package it names.
func TestAStreamsRetentionGapAndAJournalsAreOneErrorToErrorsIs(t *testing.T) {
	stream := error(&jetstream.RetentionGapError{Stream: "EVENTS", Filter: "events.>", Position: 3, FirstSeq: 9})
	dir := error(&inbox.JournalGapError{Dir: "/j", Position: 10, First: 20})
	for _, err := range []error{stream, dir, fmt.Errorf("wrapped: %w", stream), fmt.Errorf("wrapped: %w", dir)} {
		if !errors.Is(err, jetstream.ErrRetentionGap) || !errors.Is(err, inbox.ErrRetentionGap) {
			t.Errorf("%v: not both packages' ErrRetentionGap", err)
		}
	}
	if jetstream.ErrRetentionGap != inbox.ErrRetentionGap {
		t.Fatal("jetstream.ErrRetentionGap is another value than inbox.ErrRetentionGap")
	}
}
