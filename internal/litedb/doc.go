// SPDX-License-Identifier: Apache-2.0

// Package litedb is the floor both ends of the outbox stand on: an SQLite database with one writer.
// The engine's book (package outbox) and the consumer's database (package inbox) open, lock, read,
// write and fail the same way, with one rule for each:
//
//   - The writer holds an exclusive flock on the database file for its lifetime (Lock), refuses a
//     file with more than one name, and opens only a regular file, the one it locked.
//   - Connections are opened through a connector whose callback sets every pragma (Open): a pragma
//     in the DSN is silently ignored when the DSN is misspelled, a callback's fails the open.
//   - The writer is one connection; its transactions begin without the caller's cancellation, are
//     bounded statement by statement, and only the owner's own commit goes through (Writer).
//   - A call from inside a transaction of the writer's is refused at once (Holder).
//   - Readers never write; a read that met a writer's commit it could not wait out, having read
//     nothing, is read again (ReadAgain).
//   - An error that a context's end caused says so, and says whose end (WithEnd); of the caller's own
//     code's errors, only a statement the context interrupted does (Interrupted).
//
// Names says which end is speaking, so that each keeps its own sentinels and prefix.
package litedb

import (
	"fmt"
	"time"
)

// Names are one end's words for what the floor reports.
type Names struct {
	// Prefix begins the floor's own errors: "outbox: " or "inbox: ".
	Prefix string
	// Locked is wrapped when another writer holds the lock; HardLinked when the file has more than
	// one name.
	Locked, HardLinked error
}

// Config is what both ends let a caller set about their connections.
type Config struct {
	BusyTimeout time.Duration
	ReadPool    int
	VFS         string // "": the driver's default
}

// Durability is what a commit survives when the call that made it returns.
type Durability int

const (
	// DurabilityFull (the default) makes every commit durable before it returns.
	DurabilityFull Durability = iota
	// DurabilityNormal (synchronous=NORMAL) syncs the WAL only at checkpoints. A commit survives a
	// process crash but may be lost on power failure.
	DurabilityNormal
)

func (d Durability) String() string {
	switch d {
	case DurabilityFull:
		return "FULL"
	case DurabilityNormal:
		return "NORMAL"
	}
	return fmt.Sprintf("Durability(%d)", int(d))
}

// Line limits, shared by the book, the journal and the inbox.
const (
	// DefaultMaxLineSize is the journal's limit on a line.
	DefaultMaxLineSize = 16 << 20
	// MaxLineSizeLimit is the largest line limit a store accepts: SQLite holds a line whole, with a
	// transaction's pages besides, within each connection's memory (connMemory).
	MaxLineSizeLimit = 64 << 20
)
