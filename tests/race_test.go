//go:build race

package tests

// raceEnabled: under the race detector SQLite itself (compiled to Go) runs about 15 times slower, so
// the tests that walk a book of 100,000 runs run without it (make test runs them on their own).
const raceEnabled = true
