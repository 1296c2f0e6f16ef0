// SPDX-License-Identifier: Apache-2.0

package jetstream

import "context"

// HoldTurn takes run's turn as an Append under way would, so that a test can hold a batch of the run
// in flight for as long as it likes; release ends it.
func HoldTurn(ctx context.Context, s *Sink, run string) (release func(), err error) {
	return s.takeTurn(ctx, run)
}

// Turns is how many runs the sink keeps a turn for: runs with an Append under way or waiting.
func Turns(s *Sink) int { return s.turns.Len() }
