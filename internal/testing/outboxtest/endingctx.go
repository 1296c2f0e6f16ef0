// SPDX-License-Identifier: Apache-2.0

package outboxtest

import (
	"context"
	"math/rand/v2"
	"time"
)

// EndingContext returns a context that ends at a random moment: already ended, after a random
// delay under half a millisecond, at a random deadline under a millisecond, or, when inside is set,
// when the caller calls inside from its own code (a handler, a builder, a WriteTx function). cancel
// releases it in every case. The outbox's and the inbox's cancellation tests share it, so that both
// ends are held to contexts ending at the same moments.
func EndingContext(rng *rand.Rand) (ctx context.Context, cancel, inside context.CancelFunc) {
	ctx, cancel = context.WithCancel(context.Background())
	switch rng.IntN(5) {
	case 0:
		cancel()
	case 1:
		inside = cancel
	case 2:
		time.AfterFunc(time.Duration(rng.IntN(500))*time.Microsecond, cancel)
	default:
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, time.Duration(rng.IntN(1000))*time.Microsecond)
		c1 := cancel
		cancel = func() { c2(); c1() }
	}
	return ctx, cancel, inside
}
