// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"sync"
	"testing"

	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

// holdWriteLock takes the book's write lock from a connection of its own, so that the relay's next
// record waits for it (the store's busy timeout must outlast the hold); the returned function lets
// it go, once.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	tx, err := outboxtest.RawDBRW(t, path).Begin()
	if err == nil {
		_, err = tx.Exec(`UPDATE outbox_progress SET projected = projected WHERE 0`)
	}
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Rollback(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// lockAfterFirstAppend makes sink take the book's write lock once its first batch is in (see
// holdWriteLock), so that the relay's record of that batch waits; release lets the lock go, and does
// nothing before it was taken.
func lockAfterFirstAppend(t *testing.T, s *outbox.Store, sink *hookedSink) (release func()) {
	var mu sync.Mutex
	var held func()
	sink.after = func(call int) {
		if call == 1 {
			h := holdWriteLock(t, s.Path())
			mu.Lock()
			held = h
			mu.Unlock()
		}
	}
	return func() {
		mu.Lock()
		h := held
		mu.Unlock()
		if h != nil {
			h()
		}
	}
}
