// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"errors"
	"testing"

	"github.com/textmachine/outbox/internal/testing/faultvfs"
	"github.com/textmachine/outbox/internal/testing/outboxtest"
	"github.com/textmachine/outbox/outbox"
)

func TestErrNotDurableComesWithTheCommittedSeq(t *testing.T) {
	t.Parallel()
	// A deadline far off: under the operation timeout alone, a call a loaded machine keeps waiting
	// would end with the context's error, not with the fault under test.
	ctx := outboxtest.Patient(t)
	setupCalls, total := outboxtest.CountCalls(t, 12)
	seen := 0
	for at := setupCalls + 1; at <= total; at++ {
		s, _, path, name := outboxtest.FaultStore(t, func(v *faultvfs.VFS) { v.FailAt = at })
		seq, err := s.EnqueueEvent(ctx, "r", outboxtest.LineOf("x"))
		for i := 0; err == nil && i < 12; i++ {
			seq, err = s.EnqueueEvent(ctx, "r", outboxtest.LineOf("x"))
		}
		s.Close()
		if !errors.Is(err, outbox.ErrNotDurable) {
			continue
		}
		seen++
		if seq == 0 {
			t.Errorf("call %d: ErrNotDurable with seq 0", at)
			continue
		}
		s2, oerr := outbox.Open(ctx, path, outbox.WithVFS(name))
		if oerr != nil {
			t.Fatal(oerr)
		}
		if got := outboxtest.SeqsOf(outboxtest.AllLines(t, s2, "r")); len(got) < int(seq) {
			t.Errorf("call %d: ErrNotDurable for seq %d, but only %v stored", at, seq, got)
		}
		s2.Close()
	}
	if seen == 0 {
		t.Error("no fault hit a WAL sync")
	}
}
