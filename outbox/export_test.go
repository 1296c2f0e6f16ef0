// SPDX-License-Identifier: Apache-2.0

package outbox

// QueuedCalls is how many group-commit calls wait in the committer's queue, so that a test can line
// calls up in one group in a known order.
func QueuedCalls(s *Store) int { return len(s.group.queue) }

// WithLedgerStep sets how many ledger rows one transaction of Recover's conversion empties, so that a
// test spans several steps with a small book.
func WithLedgerStep(n int) Option {
	return func(c *config) error {
		c.ledgerStep = n
		return nil
	}
}

// ForgetStep is how many seqs one step of forgetting covers, so that a test can make a book several
// steps long.
const ForgetStep = forgetStep
