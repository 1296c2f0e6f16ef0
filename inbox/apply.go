// SPDX-License-Identifier: Apache-2.0

package inbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/textmachine/outbox/inbox/internal/db"
	"github.com/textmachine/outbox/journal"
)

// Event is one journal line as a handler gets it.
type Event struct {
	RunID string
	Seq   int64
	Line  []byte // the exact bytes of the journal line, without its newline; the handler's to keep
}

// Handler applies one event inside the inbox's transaction: its writes through tx commit together
// with the inbox's record of the line, or not at all. It must not commit or roll back tx, nor call
// the inbox (both are refused where they can be detected: ErrTxEnded, and ErrInHandler for a call
// given the handler's context or, for a call that writes, made on the handler's goroutine with any
// context, which is ErrCallInsideTx too; Close, which waits for the call in progress, would wait for
// ever). Its own reads outside tx go through ReadTx, given a context of its own.
// Its effects outside tx are not covered by the inbox's guarantee. It may open, release and roll
// back savepoints of its own: they end with the line (see the package's failure model).
//
// A nil error applies the line. An error wrapping ErrQuarantine parks the line's run: the line's
// writes are undone and the call goes on with the other runs. Any other error stops the call, and
// nothing of it is committed; with WithRetry, it runs the handler again for the line and then
// quarantines the line's run alone.
type Handler func(ctx context.Context, tx *sql.Tx, ev Event) error

// Report counts what a call did with its lines; each line counts in exactly one field.
type Report struct {
	Applied     int // lines whose handler ran and committed
	Duplicates  int // lines at or below their run's high-water mark, with the bytes that were applied
	Stale       int // lines at or below the high-water mark but older than the digest window: not applied
	Quarantined int // lines not applied because their run is quarantined (including runs quarantined by this call)
}

// Apply applies lines, each a journal line without its newline, in one transaction and one WAL sync.
// Each line's key is read with journal.LineKey; for its run:
//
//   - seq == high-water mark + 1: the handler runs, and its effects, the new high-water mark and the
//     line's digest commit together;
//   - seq ≤ high-water mark with the bytes that were applied: Duplicates, the handler is not called;
//   - seq ≤ high-water mark within the digest window with other bytes: the run is quarantined
//     ("conflict");
//   - seq ≤ high-water mark − window, or a digest not kept: Stale, never applied;
//   - seq > high-water mark + 1: the run is quarantined ("gap");
//   - a line of a quarantined run: Quarantined, nothing else changes.
//
// Every line is parsed before anything is written: a line that is not a journal line (no key, not
// UTF-8, a lone-surrogate run id, longer than the limit, holding a newline) returns a *LineError
// wrapping journal.ErrMalformed, and nothing is applied. A handler error stops the call with nothing
// committed, wrapped with the line's run and seq (with WithRetry: the line is tried again, then its
// run quarantined, and the call goes on); a handler's panic rolls the call back and goes on
// as the same panic. Any error means nothing of the call is stored, and the Report is zero.
func (in *Inbox) Apply(ctx context.Context, lines [][]byte, h Handler) (Report, error) {
	return in.apply(ctx, nil, lines, h)
}

// ApplyFrom is Apply for a source that keeps its position in the inbox's database. It applies lines
// as Apply does and, in the same transaction, stores to as source's position, but only if the
// position stored now is from (nil: none stored, or rewound; see SourceState). Otherwise nothing is
// applied or stored and the error is ErrSourceMoved: the source must read its position again
// (SourcePosition) and re-read.
// With no lines it only checks, or stores a first position. A position of no bytes is none.
func (in *Inbox) ApplyFrom(ctx context.Context, source string, from, to []byte, lines [][]byte, h Handler) (Report, error) {
	if err := checkName("source name", source, MaxSourceNameLen); err != nil {
		return Report{}, err
	}
	if len(from) > MaxPositionLen || len(to) > MaxPositionLen {
		return Report{}, fmt.Errorf("inbox: source %q: a position of %d bytes, at most %d", source, max(len(from), len(to)), MaxPositionLen)
	}
	return in.apply(ctx, &move{source, from, to}, lines, h)
}

// MaxPositionLen bounds a source's position, in bytes: a position says where to read next, not what
// was read.
const MaxPositionLen = 64 << 10

// move is a source's position before and after a call of ApplyFrom.
type move struct {
	source   string
	from, to []byte
}

// key is a line's (run, seq) and digest, parsed before anything is written.
type key struct {
	run    string
	seq    int64
	digest [sha256.Size]byte
}

func (in *Inbox) apply(ctx context.Context, m *move, lines [][]byte, h Handler) (Report, error) {
	if h == nil {
		return Report{}, errors.New("inbox: nil handler")
	}
	if err := in.checkNotInsideTx(ctx); err != nil {
		return Report{}, err
	}
	keys, err := in.parse(lines)
	if err != nil {
		return Report{}, err
	}
	if m == nil && len(lines) == 0 {
		return Report{}, in.read(ctx, func() error { return nil })
	}
	var rep Report
	err = in.write(ctx, func(t *txn) error {
		rep = Report{}
		if m != nil {
			if err := t.checkSource(m); err != nil {
				return err
			}
		}
		hctx := in.wr.Mark(ctx)
		for i := range keys {
			if err := t.line(hctx, &keys[i], lines[i], h, &rep); err != nil {
				return err
			}
		}
		if t.spUsed {
			// A handler that opened a savepoint of the inbox's name and returned nil left the
			// inbox's own open beneath it. Its line's writes are kept either way, as applied; the
			// call fails all the same, so that the misuse is reported whether or not a later line
			// of the call is undone.
			if err := t.noSavepointLeft(); err != nil {
				return wrapf(err, "after the call's last line")
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
		if err := t.count(rep); err != nil {
			return err
		}
		if m != nil {
			if err := t.in.q.SourceSet(t.ctx, t.on(stmtSourceSet), db.SourceSetParams{
				Name: m.source, Position: position(m.to), UpdatedAt: t.now,
			}); err != nil {
				return fmt.Errorf("inbox: store the position of source %q: %w", m.source, err)
			}
		}
		return t.trimIdle()
	})
	if err != nil {
		return Report{}, err
	}
	if m != nil && in.cfg.batchHook != nil {
		in.cfg.batchHook(m.source, rep)
	}
	return rep, nil
}

// position is how a position is stored: none (NULL) when it has no bytes.
func position(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return p
}

// parse reads every line's key with the journal's rules, before anything is written.
func (in *Inbox) parse(lines [][]byte) ([]key, error) {
	keys := make([]key, len(lines))
	for i, l := range lines {
		switch {
		case len(l) > in.cfg.maxLine:
			return nil, &LineError{i, fmt.Errorf("%w: line too long (%d bytes; the limit is %d)", journal.ErrMalformed, len(l), in.cfg.maxLine)}
		case bytes.IndexByte(l, '\n') >= 0:
			return nil, &LineError{i, fmt.Errorf("%w: the line holds a newline", journal.ErrMalformed)}
		}
		run, seq, err := journal.LineKey(l)
		if err != nil {
			return nil, &LineError{i, err}
		}
		keys[i] = key{run: run, seq: seq, digest: sha256.Sum256(l)}
	}
	return keys, nil
}

// checkSource refuses the call when the source's stored position is not the one it started from.
func (t *txn) checkSource(m *move) error {
	r, err := t.in.q.SourceGet(t.ctx, t.on(stmtSourceGet), m.source)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("inbox: read the position of source %q: %w", m.source, err)
	}
	// A rewound source's position is none: it starts again from nil, as SourcePosition says.
	if cur, _ := sourceState(r.Position, r.Rewound); !bytes.Equal(cur, m.from) {
		return fmt.Errorf("%w: source %q", ErrSourceMoved, m.source)
	}
	return nil
}

// nextSeq is the seq a run at high-water mark hwm needs next: hwm + 1, or 0 (none) for a run that
// has applied math.MaxInt64, the last seq a journal line can have. Seqs start at 1, so 0 is never
// a seq a run needs.
func nextSeq(hwm int64) int64 {
	if hwm == math.MaxInt64 {
		return 0
	}
	return hwm + 1
}

// line decides one line's outcome and, for the run's next line, runs the handler.
func (t *txn) line(hctx context.Context, k *key, line []byte, h Handler, rep *Report) error {
	r, err := t.run(k.run)
	if err != nil {
		return err
	}
	switch {
	case r.quarantined:
		rep.Quarantined++
		return nil
	case k.seq-1 == r.hwm:
		return t.applyLine(hctx, r, k, line, h, rep)
	case k.seq-1 > r.hwm:
		rep.Quarantined++
		next := nextSeq(r.hwm) // below k.seq, so never none
		return t.quarantine(r, "gap", next, k.seq,
			fmt.Sprintf("seq %d came when the run needed seq %d: seqs %d to %d are missing", k.seq, next, next, k.seq-1))
	case k.seq <= r.hwm-t.in.cfg.window:
		rep.Stale++
		return nil
	}
	d, ok, err := t.digest(r, k.seq)
	switch {
	case err != nil:
		return err
	case !ok:
		rep.Stale++
		return nil
	case d == k.digest:
		rep.Duplicates++
		return nil
	}
	rep.Quarantined++
	return t.quarantine(r, "conflict", nextSeq(r.hwm), k.seq,
		fmt.Sprintf("seq %d came again with other bytes: applied sha256 %x, got sha256 %x", k.seq, d, k.digest))
}

// applyLine runs the handler for the run's next line inside a savepoint, so that a handler that
// quarantines its run undoes its own writes for the line and nothing else. With WithRetry, a handler
// error undoes the line's writes and runs the handler again in a new savepoint, after the backoff,
// up to the retries allowed; the last failure quarantines the run.
func (t *txn) applyLine(hctx context.Context, r *runTx, k *key, line []byte, h Handler, rep *Report) error {
	for attempt := 0; ; attempt++ {
		if err := t.savepoint(spBegin); err != nil {
			return fmt.Errorf("inbox: run %q seq %d: savepoint: %w", r.id, k.seq, err)
		}
		t.in.handling.Store(true)
		herr := t.callHandler(hctx, h, Event{RunID: k.run, Seq: k.seq, Line: bytes.Clone(line)})
		t.in.handling.Store(false)
		if err := t.alive(); err != nil {
			if herr != nil {
				err = fmt.Errorf("%w (the handler returned: %w)", err, herr)
			}
			return wrapf(err, "run %q seq %d", r.id, k.seq)
		}
		switch {
		case herr == nil:
			if err := t.endLine(false); err != nil {
				return lineError(r, k, "release the savepoint", err, nil)
			}
			r.hwm = k.seq
			r.digests = append(r.digests, k.digest)
			rep.Applied++
			return nil
		case errors.Is(herr, ErrQuarantine):
			if err := t.endLine(true); err != nil {
				return lineError(r, k, "undo the handler's writes", err, herr)
			}
			rep.Quarantined++
			return t.quarantine(r, "handler", k.seq, k.seq, herr.Error())
		}
		retry := t.in.cfg.retry
		if retry == nil || t.ctx.Err() != nil {
			// A handler that failed because the call's context ended has said nothing about
			// its line: the call fails, and the line is applied again by the next one.
			return fmt.Errorf("inbox: run %q seq %d: handler: %w", r.id, k.seq, herr)
		}
		if err := t.endLine(true); err != nil {
			return lineError(r, k, "undo the handler's writes", err, herr)
		}
		if attempt == retry.n {
			rep.Quarantined++
			return t.quarantine(r, "handler", k.seq, k.seq,
				fmt.Sprintf("the handler failed %d times; the last error: %v", attempt+1, herr))
		}
		t.in.cfg.logger.Info("inbox: handler failed, retrying", "run", r.id, "seq", k.seq, "attempt", attempt+1, "error", herr)
		if err := retry.wait(t.ctx, attempt+1); err != nil {
			return fmt.Errorf("inbox: run %q seq %d: waiting to run the handler again (it returned: %v): %w", r.id, k.seq, herr, err)
		}
	}
}

// lineError is the error of ending a line's savepoint, naming the handler's misuse plainly.
func lineError(r *runTx, k *key, what string, err, herr error) error {
	if errors.Is(err, ErrSavepointMisused) {
		if herr != nil {
			return wrapf(err, "run %q seq %d (its handler returned: %v)", r.id, k.seq, herr)
		}
		return wrapf(err, "run %q seq %d", r.id, k.seq)
	}
	return fmt.Errorf("inbox: run %q seq %d: %s: %w", r.id, k.seq, what, err)
}
