// SPDX-License-Identifier: Apache-2.0

// Package tests holds what spans processes and packages: the crash campaigns that kill real engine
// processes, the SQLite fault campaigns, sustained load, random operations checked against a model,
// and the store and the journal file together. Each package's own behaviour tests live beside it.
package tests

import (
	"testing"

	"github.com/textmachine/outbox/internal/testing/crashtest"
)

// TestMain lets a test re-execute this binary as a child process in a role, so that crashes are
// tested on real processes.
func TestMain(m *testing.M) {
	crashtest.Main(m, map[string]func() int{"crash-engine": crashEngine,
		"long-line-engine": longLineEngine, "recovering-engine": recoveringEngine, "crash-platform": crashPlatform,
		"unrecorded-engine": unrecordedEngine, "lifecycle-engine": lifecycleEngine,
		"lifecycle-consumer": lifecycleConsumer})
}
