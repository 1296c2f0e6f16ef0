// SPDX-License-Identifier: Apache-2.0

package keyedturn

import (
	"context"
	"errors"
	"testing"
)

type held struct{ pending int }

func (h *held) Keep() bool { return h.pending > 0 }

func TestAKeysTurnHasOneHolderAndAWaiterGivesUpWhenItsContextEnds(t *testing.T) {
	var ts Turns[struct{}]
	ctx := context.Background()
	a, err := ts.Take(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.Take(ctx, "other", nil); err != nil {
		t.Fatalf("another key's turn while k is held: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ts.Take(cancelled, "k", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("k's turn while held, the waiter's context ended: %v, want context.Canceled", err)
	}
	stop := make(chan struct{})
	close(stop)
	if _, err := ts.Take(ctx, "k", stop); !errors.Is(err, ErrStopped) {
		t.Fatalf("k's turn while held, stopped: %v, want ErrStopped", err)
	}
	got := make(chan error, 1)
	go func() {
		b, err := ts.Take(ctx, "k", nil)
		if err == nil {
			ts.Release("k", b)
		}
		got <- err
	}()
	ts.Release("k", a)
	if err := <-got; err != nil {
		t.Fatalf("k's turn once released: %v", err)
	}
	if n := ts.Len(); n != 1 {
		t.Errorf("%d keys kept, want 1: the other key, still held", n)
	}
}

func TestAKeysEntryIsKeptOnlyWhileItsHeldValueAsksForIt(t *testing.T) {
	var ts Turns[held]
	ctx := context.Background()
	a, err := ts.Take(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Held.pending = 1
	ts.Release("k", a)
	if n := ts.Len(); n != 1 {
		t.Fatalf("%d keys kept, want 1: k's held value asks for it", n)
	}
	b, err := ts.Take(ctx, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Held.pending != 1 {
		t.Errorf("the next holder finds %d pending, want 1", b.Held.pending)
	}
	b.Held.pending = 0
	ts.Release("k", b)
	if n := ts.Len(); n != 0 {
		t.Errorf("%d keys kept, want 0", n)
	}
}
