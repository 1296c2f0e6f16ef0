// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"testing"

	"github.com/textmachine/outbox/internal/testing/crashtest"
)

// TestMain lets a test re-execute this binary as a child process in a role, so that the lock is
// tested across real processes.
func TestMain(m *testing.M) {
	crashtest.Main(m, map[string]func() int{"hold-inbox": holdInbox, "crash-consumer": crashConsumer, "crash-journal-consumer": crashJournalConsumer})
}
