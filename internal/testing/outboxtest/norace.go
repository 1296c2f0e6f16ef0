// SPDX-License-Identifier: Apache-2.0

//go:build !race

package outboxtest

// RaceEnabled reports whether the race detector is on.
const RaceEnabled = false
