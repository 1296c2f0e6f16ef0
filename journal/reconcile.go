// SPDX-License-Identifier: Apache-2.0

package journal

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/textmachine/outbox/outbox"
)

// RunChange is one run whose position Reconcile records: the highest seq the book recorded for it
// (0 and Known false for a run the book never held) and the journal's.
type RunChange = outbox.BookLack

// ReconcileReport is what Reconcile found, and with apply, recorded.
type ReconcileReport struct {
	Runs    []RunChange // the runs the journal holds further than the book, by run id
	Keys    int64       // once keys of those runs' lines the book never had, found in the journal
	Applied bool
}

// reconcileFlush is how many keys Reconcile holds before it records them: the keys of one run go
// in calls of at most this many.
const reconcileFlush = 2048

// Reconcile compares the journal in dir with the book s and, with apply, makes the book accept the
// journal's positions: for each run the journal holds further than the book recorded (see
// outbox.ErrBookBehind), it records the run projected up to the journal's last seq, and puts into the
// ledger each once key that the run's lines past the book's last seq carry in their "once_key" member
// (OnceKeyMember: Event writes it). Without apply it changes nothing and reports what it would do.
//
// It opens the journal (its lock: stop the engine first) and reads it once, in order, segment after
// segment, holding per run of the report a few numbers and at most reconcileFlush keys in all: memory
// follows the runs, not the lines. Each run's keys are recorded in calls of a bounded transaction,
// each moving the run's position up to its last key; a run's final call records its last seq. A call
// refused (a key the book holds elsewhere: outbox.ErrAnnounceConflict) stops it, with every earlier
// call kept: the next Reconcile goes on from there. A line of the journal that carries a once key the
// book would not take as one (outbox.MaxOnceKeyLen) stops it too.
func Reconcile(ctx context.Context, s *outbox.Store, dir string, apply bool) (ReconcileReport, error) {
	var rep ReconcileReport
	j, err := Open(dir)
	if err != nil {
		return rep, err
	}
	defer j.Close()
	runs, err := j.SinkRuns(ctx)
	if err != nil {
		return rep, err
	}
	_, lacks, err := s.BookLacks(ctx, runs, -1)
	if err != nil {
		return rep, err
	}
	rep.Runs = lacks
	if len(lacks) == 0 {
		return rep, nil
	}
	behind := make(map[string]*reconcileRun, len(lacks))
	for _, l := range lacks {
		behind[l.RunID] = &reconcileRun{from: l.BookLast, to: l.SinkLast}
	}
	held := 0
	flush := func(id string, r *reconcileRun, upTo int64) error {
		if err := s.AcceptSinkLines(ctx, id, upTo, r.keys); err != nil {
			return err
		}
		held -= len(r.keys)
		r.keys = r.keys[:0]
		return nil
	}
	err = j.eachLine(ctx, func(line []byte) error {
		id, seq, key, ok, err := lineOnceKey(line)
		if err != nil || !ok {
			return err
		}
		r := behind[id]
		if r == nil || seq <= r.from || seq > r.to || r.seen(seq) {
			return nil
		}
		rep.Keys++
		if !apply {
			return nil
		}
		r.keys = append(r.keys, outbox.SinkKey{Seq: seq, Key: key, Digest: outbox.LineDigest(line)})
		r.top = max(r.top, seq)
		held++
		if len(r.keys) >= reconcileFlush || held >= reconcileFlush {
			// The run's position moves up to its highest key found so far: the journal holds every
			// line of a run up to its last, so it holds those.
			for id, r := range behind {
				if len(r.keys) > 0 {
					if err := flush(id, r, r.top); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	if err != nil || !apply {
		return rep, err
	}
	for _, l := range lacks {
		if err := flush(l.RunID, behind[l.RunID], l.SinkLast); err != nil {
			return rep, err
		}
	}
	rep.Applied = true
	return rep, nil
}

type reconcileRun struct {
	from, to int64 // the book's last seq and the journal's
	top      int64 // the highest seq of a key found
	keys     []outbox.SinkKey
	counted  int64 // the highest seq whose key is counted: a re-delivered copy is not counted again
}

// seen reports whether seq's line was met before (a re-delivery's copy), and notes it.
func (r *reconcileRun) seen(seq int64) bool {
	if seq <= r.counted {
		return true
	}
	r.counted = seq
	return false
}

// lineOnceKey reads a line's key and its "once_key" member at the top level, matched by its exact
// name (encoding/json would match a member of the producer's named "Once_Key" too). ok is false for a
// line that carries none, or is not a journal line: verify judges those.
func lineOnceKey(line []byte) (runID string, seq int64, key string, ok bool, err error) {
	if !bytes.Contains(line, []byte("once")) && !bytes.Contains(line, []byte(`\u`)) {
		return "", 0, "", false, nil
	}
	var sc scanner
	n, run, s, why := sc.parseNext(append(line[:len(line):len(line)], '\n'))
	if why != whyNone || n != len(line) {
		return "", 0, "", false, nil
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(line, &members) != nil {
		return "", 0, "", false, nil
	}
	raw, found := members[OnceKeyMember]
	if !found {
		return "", 0, "", false, nil
	}
	if err := json.Unmarshal(raw, &key); err != nil || key == "" {
		return "", 0, "", false, fmt.Errorf("journal: run %q seq %d: its %q member is not a once key: %s", run, s, OnceKeyMember, raw)
	}
	return string(run), s, key, true, nil
}

// eachLine reads the journal's segments in order, one line at a time without its newline, up to the
// last complete line. A line longer than the limit is no line the journal wrote: it stops the read.
func (j *Journal) eachLine(ctx context.Context, fn func(line []byte) error) error {
	j.mu.Lock()
	bases := make([]int64, 0, len(j.sealed)+1)
	for _, seg := range j.sealed {
		bases = append(bases, seg.base)
	}
	bases = append(bases, j.tailBase)
	tailSize := j.size
	j.mu.Unlock()
	buf := make([]byte, 0, readChunk)
	for i, base := range bases {
		f, err := os.Open(filepath.Join(j.dir, segmentName(base)))
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		var r io.Reader = f
		if i == len(bases)-1 {
			r = io.LimitReader(f, tailSize)
		}
		sc := bufio.NewScanner(r)
		sc.Buffer(buf, outbox.DefaultMaxLineSize+1)
		for sc.Scan() {
			if err := j.interrupted(ctx); err != nil {
				f.Close()
				return err
			}
			if err := fn(sc.Bytes()); err != nil {
				f.Close()
				return err
			}
		}
		err = sc.Err()
		f.Close()
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: %s holds a line longer than %d bytes", ErrMalformed, segmentName(base), outbox.DefaultMaxLineSize)
		}
		if err != nil {
			return fmt.Errorf("journal: read %s: %w", segmentName(base), err)
		}
	}
	return nil
}
