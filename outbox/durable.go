// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/ncruces/go-sqlite3/vfs"
)

// At DurabilityFull the store does not let SQLite sync the WAL inside COMMIT. SQLite holds the write
// lock through that fdatasync, so the next transaction could not even begin until the disk answered,
// and a burst of callers would be capped at one commit per fdatasync whatever the grouping.
//
// Instead the writer connection runs at synchronous=NORMAL, which writes a commit's frames to the WAL
// and releases the lock at once, and the caller of every commit waits, before returning, for an
// fdatasync of the WAL that began after its commit finished. That is what FULL adds to NORMAL in WAL
// mode, one WAL sync after each commit (https://sqlite.org/pragma.html#pragma_synchronous), moved out
// of the lock: while one group waits for the disk, the next is already writing. NORMAL keeps every
// other sync SQLite makes, the WAL header when the log restarts and both files around a checkpoint, so
// a power cut leaves the WAL as a prefix of its commits, each acknowledged one included. One fdatasync
// covers every commit written before it, so concurrent waiters share it: whoever finds no sync running
// starts one, and everybody whose commit it covers returns with it. A sync that would start while the
// group committer is writing waits for that group first (briefly, see groupWait): otherwise the group's
// callers would wait for a whole further sync, and the disk allows only so many a second.
//
// The two are equivalent where the file has powersafe overwrite, as the driver's own VFS declares: a
// FULL commit then needs no padding of the WAL to a sector boundary either. A VFS without it gets
// SQLite's own FULL.
//
// A commit is visible to readers before it is durable. Nothing that leaves the process may depend on
// such a commit: the pending read (the relay's source) waits for the sync of every commit it may have
// seen, because a line projected and then lost to power failure would come back under its number with
// other bytes. A caller of EnqueueOnce that finds its key already queued waits as well, since its group
// commits after the one that queued the key.

// durability tracks which commits are durable. Tickets number the store's commits in order: issued is
// taken before COMMIT, so every commit a reader can see has a ticket at most issued; written is set
// after COMMIT returns, so a sync that starts then covers every ticket up to it.
type durability struct {
	wal     vfs.File // the writer connection's WAL; nil when the store does not sync it itself
	issued  atomic.Uint64
	written atomic.Uint64

	// Group calls committed and made durable, and how many the last sync released: the committer
	// waits briefly for that many to come back before it begins a group (see gatherWait).
	writtenCalls atomic.Int64
	syncedCalls  int64
	released     atomic.Int64

	mu      sync.Mutex
	cond    *sync.Cond
	synced  uint64 // every ticket up to synced is durable
	syncing bool
	group   chan struct{} // closed when the committer's group in progress has committed
	err     error         // a failed sync: nothing after it is trusted until the store is reopened
}

// groupWait bounds how long a sync waits for the group being written: far longer than a group takes
// (about 0.1 ms for 16 calls here), short enough that a stalled group costs its followers little.
const groupWait = 2 * time.Millisecond

func newDurability() *durability {
	d := &durability{}
	d.cond = sync.NewCond(&d.mu)
	return d
}

// attachWriter keeps the writer connection's driver handle and, at DurabilityFull, finds its WAL file
// and syncs it once, so that whatever an earlier process committed without a sync is durable before
// this store projects any of it. Both are valid for the connection's life, and the store never lets
// that connection go: it has one, never idle-closed, and no context of a caller's ever reaches a
// transaction on it (see Store.write), which is what makes database/sql discard a connection.
func (s *Store) attachWriter(ctx context.Context) error {
	var wal vfs.File
	err := s.wr.Attach(ctx, s.w, func(c *sqlite3.Conn) error {
		s.addLines.conn = c
		if s.cfg.durability != DurabilityFull {
			return nil
		}
		h, err := c.FileControl("main", sqlite3.FCNTL_JOURNAL_POINTER)
		if err != nil {
			return err
		}
		f, ok := h.(vfs.File)
		if !ok || f == nil {
			return errors.New("the connection has no open WAL")
		}
		if f.DeviceCharacteristics()&vfs.IOCAP_POWERSAFE_OVERWRITE == 0 {
			// Without powersafe overwrite, a FULL commit pads the WAL to a sector boundary so
			// that the next commit cannot tear a synced one; only SQLite's own FULL does that.
			return c.Exec("PRAGMA synchronous=FULL")
		}
		wal = f
		return nil
	})
	if err != nil {
		return fmt.Errorf("find the WAL: %w", mapErr(ctx, err))
	}
	if wal == nil {
		return nil
	}
	s.dur.wal = wal
	// A ticket after every commit made so far, the earlier process's included.
	t, _ := s.dur.commit(0, func() error { return nil })
	return t.wait()
}

// ticket is a commit's place in the order of the store's commits. The zero ticket belongs to a commit
// that nothing waits for.
type ticket struct {
	d *durability
	n uint64
}

// commit makes the commit that fn performs under the next ticket, in the order the tickets rely on:
// the ticket is issued before COMMIT, so that every commit a reader can see has a ticket at most
// issued, and recorded as written once COMMIT has returned, whether it succeeded, failed or panicked,
// since a sync covers every ticket up to written and one never recorded would stall them all. calls
// is how many of the group committer's calls the commit holds (0 for any other), so that a sync can
// tell how many callers it releases.
//
// Commits are made one at a time on the writer connection, but they are not recorded one at a time:
// database/sql gives the connection back to its pool inside Tx.Commit, so the next transaction can
// begin, commit and be recorded before this call's deferred record runs. Written therefore only moves
// forward. That is sound: the later ticket's COMMIT began after this one's had finished. Storing this
// ticket over the later one would leave written below a commit that a caller is waiting for, and that
// caller, holding the writer, would sync forever.
func (d *durability) commit(calls int, fn func() error) (ticket, error) {
	n := d.issued.Add(1)
	defer func() {
		d.writtenCalls.Add(int64(calls))
		for {
			cur := d.written.Load()
			if cur >= n || d.written.CompareAndSwap(cur, n) {
				break
			}
		}
	}()
	return ticket{d, n}, fn()
}

// wait returns once the ticket's commit is durable; see durability.wait.
func (t ticket) wait() error {
	if t.d == nil {
		return nil
	}
	return t.d.wait(t.n)
}

// groupStart and groupEnd bracket a group the committer is writing, for a sync to wait on.
func (d *durability) groupStart() {
	if d.wal == nil {
		return
	}
	d.mu.Lock()
	d.group = make(chan struct{})
	d.mu.Unlock()
}

func (d *durability) groupEnd() {
	if d.wal == nil {
		return
	}
	d.mu.Lock()
	close(d.group)
	d.group = nil
	d.mu.Unlock()
}

// broken returns ErrSyncFailed once a sync has failed: a write that has not begun must not begin.
func (d *durability) broken() error {
	if d.wal == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return fmt.Errorf("%w (%w)", ErrSyncFailed, d.err.(*notDurable).err)
	}
	return nil
}

// wait returns once the commit holding ticket t is durable. It does not take a context: the commit
// has been made, and only the disk decides when it is durable; an fdatasync cannot be cancelled.
func (d *durability) wait(t uint64) error {
	if d.wal == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.err == nil && d.synced < t {
		if d.syncing {
			d.cond.Wait()
			continue
		}
		d.syncing = true
		g := d.group
		d.mu.Unlock()
		if g != nil {
			// The committer is writing a group: its callers, whose commits this sync would
			// otherwise miss, are worth a short wait, since the disk allows only so many syncs a
			// second. The wait is bounded so that a group that stalls cannot stall the sync.
			timer := time.NewTimer(groupWait)
			select {
			case <-g:
			case <-timer.C:
			}
			timer.Stop()
		}
		// Everything written so far goes into this sync, including commits of callers who have not
		// started waiting yet.
		calls := d.writtenCalls.Load() // read first: never more calls than the tickets cover
		upTo := d.written.Load()
		err := syncWAL(d.wal)
		d.mu.Lock()
		d.syncing = false
		if err != nil {
			d.err = &notDurable{err}
		} else if upTo > d.synced {
			d.synced = upTo
			d.released.Store(calls - d.syncedCalls)
			d.syncedCalls = calls
		}
		d.cond.Broadcast()
	}
	return d.err
}

// syncWAL syncs the WAL, turning a panic of the VFS into the sync's failure: the store's locks are
// not held across it in a way a panic could release, and the process must not die of it.
func syncWAL(wal vfs.File) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("the VFS panicked: %v", v)
		}
	}()
	return wal.Sync(vfs.SYNC_NORMAL)
}

// notDurable is the error of a failed WAL sync, as the commits it was to cover get it.
type notDurable struct{ err error }

func (e *notDurable) Error() string   { return ErrNotDurable.Error() + ": " + e.err.Error() }
func (e *notDurable) Unwrap() []error { return []error{ErrNotDurable, e.err} }

// waitVisible returns once every commit a read that has just finished could have seen is durable.
func (d *durability) waitVisible() error {
	if d.wal == nil {
		return nil
	}
	return d.wait(d.issued.Load())
}
