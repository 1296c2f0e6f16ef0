// SPDX-License-Identifier: Apache-2.0

// Package keyedturn gives goroutines turns by key: one holder of a key's turn at a time, any number of
// keys at once, a waiter that gives up when its context ends, and no entry kept for a key that nobody
// holds or waits for (unless its value must outlive them).
package keyedturn

import (
	"context"
	"errors"
	"sync"
)

// ErrStopped is returned by Take when its stop channel is closed before the turn is free.
var ErrStopped = errors.New("keyedturn: stopped")

// Turns are the turns of every key. The zero value is ready; it must not be copied after first use.
//
// When *V has a method Keep() bool, a key's entry stays once nobody holds or waits for its turn as
// long as Keep reports true, so that its Held value reaches the next holder.
type Turns[V any] struct {
	mu    sync.Mutex
	turns map[string]*Turn[V]
}

// Turn is one key's turn.
type Turn[V any] struct {
	sem  chan struct{} // capacity 1: a value in it is the turn, held
	refs int           // the holder and the waiters; the entry goes when it reaches 0
	// Held is the holders' own state: read and written only by the holder of the turn.
	Held V
}

// Take waits for key's turn. It fails with ctx's error when ctx ends first, and with ErrStopped when
// stop (nil: never) is closed first.
func (ts *Turns[V]) Take(ctx context.Context, key string, stop <-chan struct{}) (*Turn[V], error) {
	ts.mu.Lock()
	if ts.turns == nil {
		ts.turns = map[string]*Turn[V]{}
	}
	t := ts.turns[key]
	if t == nil {
		t = &Turn[V]{sem: make(chan struct{}, 1)}
		ts.turns[key] = t
	}
	t.refs++
	ts.mu.Unlock()
	select {
	case t.sem <- struct{}{}:
		return t, nil
	case <-ctx.Done():
		ts.leave(key, t)
		return nil, ctx.Err()
	case <-stop:
		ts.leave(key, t)
		return nil, ErrStopped
	}
}

// Release gives key's turn up.
func (ts *Turns[V]) Release(key string, t *Turn[V]) {
	<-t.sem
	ts.leave(key, t)
}

// Keeper is what a Held value implements to keep its key's entry (see Turns).
type Keeper interface{ Keep() bool }

// leave forgets a holder or a waiter, and the key's entry with the last of them, unless its Held
// value keeps it.
func (ts *Turns[V]) leave(key string, t *Turn[V]) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if t.refs--; t.refs > 0 {
		return
	}
	// Held is read only once refs is 0: no one holds the turn then.
	if k, ok := any(&t.Held).(Keeper); ok && k.Keep() {
		return
	}
	delete(ts.turns, key)
}

// Len is how many keys have an entry: held, waited for, or kept.
func (ts *Turns[V]) Len() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.turns)
}
