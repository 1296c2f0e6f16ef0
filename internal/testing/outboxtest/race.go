// SPDX-License-Identifier: Apache-2.0

//go:build race

package outboxtest

// RaceEnabled reports whether the race detector is on. Under it SQLite itself (compiled to Go) runs
// about 15 times slower, so the tests that walk a book of 100,000 runs run without it (make test runs
// them on their own).
const RaceEnabled = true
