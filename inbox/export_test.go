// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// WithLineSavepoint names the savepoint the inbox keeps around each line, for a test that plays a
// handler that knows the name (none can learn it otherwise).
func WithLineSavepoint(name string) Option {
	return func(c *config) error {
		c.savepoint = name
		return nil
	}
}

// SavepointPrefix is how the name drawn for each transaction begins.
const SavepointPrefix = savepointPrefix

// WithClock sets the inbox's clock, for a test that moves time past the digest retention.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		c.now = now
		return nil
	}
}

// holdJournalRegistration holds the first registration of the journal dir for which at(pos) is
// true, just before it is written: held receives its position once it is held, and release lets it
// (and every later one) through. The hook is removed when the test ends.
func holdJournalRegistration(t testing.TB, dir string, at func(pos int64) bool) (held <-chan int64, release func()) {
	h := make(chan int64, 1)
	gate := make(chan struct{})
	var taken atomic.Bool
	var released sync.Once
	holdJournalRegister = func(d string, pos int64) {
		if d != dir || !at(pos) || !taken.CompareAndSwap(false, true) {
			return
		}
		h <- pos
		<-gate
	}
	release = func() { released.Do(func() { close(gate) }) }
	t.Cleanup(func() {
		release()
		holdJournalRegister = nil
	})
	return h, release
}
