// SPDX-License-Identifier: Apache-2.0

// Package faultpoint names the places in the write path, the relay and recovery where a crash or an
// I/O error is most likely to break a guarantee, so that tests can stop a real process exactly there.
//
// A point costs one atomic load when no hook is installed. Only tests install one.
package faultpoint

import "sync/atomic"

// The named points, in the order an event passes them.
const (
	MigrationStep       = "migrations.step"       // a store's open: one migration committed with its version, the next not begun
	BeforeCommit        = "store.before_commit"   // the write transaction is complete but not committed
	AfterCommit         = "store.after_commit"    // committed, the caller not yet told
	JournalMidWrite     = "journal.mid_write"     // half of a batch's bytes are written
	JournalBeforeSync   = "journal.before_sync"   // the whole batch is written, not yet fdatasynced
	RelayAfterAppend    = "relay.after_append"    // the sink has the batch, progress not yet recorded
	RecoverBeforeForget = "recover.before_forget" // earlier runs projected, their rows not yet dropped
	RecoverAfterForget  = "recover.after_forget"  // earlier runs' rows dropped
	ForgetStep          = "forget.step"           // one bounded step of forgetting committed, the next not begun
	InboxBeforeCommit   = "inbox.before_commit"   // an inbox call's transaction is complete but not committed
	InboxAfterCommit    = "inbox.after_commit"    // committed, the caller not yet told
	InboxBetweenBatches = "inbox.between_batches" // a source committed a batch and has not begun the next
	InboxTornTail       = "inbox.torn_tail"       // a file source met a last line without its newline
)

var hook atomic.Pointer[func(string)]

// Set installs fn as the hook called at every point; nil removes it.
func Set(fn func(point string)) {
	if fn == nil {
		hook.Store(nil)
		return
	}
	hook.Store(&fn)
}

// Armed reports whether a hook is installed, for points that must change what they do to exist (a
// write split in two so that its middle can be reached).
func Armed() bool { return hook.Load() != nil }

// Hit calls the hook, if any, with the point's name.
func Hit(point string) {
	if h := hook.Load(); h != nil {
		(*h)(point)
	}
}
