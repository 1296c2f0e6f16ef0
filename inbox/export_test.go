// SPDX-License-Identifier: Apache-2.0

package inbox

import "time"

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
