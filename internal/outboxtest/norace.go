//go:build !race

package outboxtest

// RaceEnabled reports whether the race detector is on.
const RaceEnabled = false
