// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/textmachine/outbox/inbox"
)

// event renders a journal line of the given type and raw JSON data, as journal.Builder lays it out.
func event(run string, seq int64, typ, data string) []byte {
	return fmt.Appendf(nil, `{"engine_run_id":%q,"seq":%d,"type":%q,"at":"2026-12-03T11:00:00.000000000Z","data":%s}`, run, seq, typ, data)
}

type orderPlaced struct {
	ID    string `json:"id"`
	Cents int64  `json:"cents"`
}

type orderCancelled struct {
	ID string `json:"id"`
}

// ordersRouter routes order_placed and order_cancelled into a table "orders" of the consumer's.
func ordersRouter(t testing.TB, in *inbox.Inbox, opts ...inbox.RouterOption) *inbox.Router {
	t.Helper()
	err := in.WriteTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY, cents INTEGER NOT NULL, cancelled INTEGER NOT NULL DEFAULT 0, run TEXT NOT NULL, seq INTEGER NOT NULL)`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r := inbox.NewRouter(opts...)
	r.Handle("order_placed", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v orderPlaced) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, cents, run, seq) VALUES (?, ?, ?, ?)`, v.ID, v.Cents, ev.RunID, ev.Seq)
		return err
	}))
	r.Handle("order_cancelled", inbox.Decode(func(ctx context.Context, tx *sql.Tx, ev inbox.Event, v *orderCancelled) error {
		_, err := tx.ExecContext(ctx, `UPDATE orders SET cancelled = 1 WHERE id = ?`, v.ID)
		return err
	}))
	return r
}

func orders(t testing.TB, path string) string {
	t.Helper()
	rows, err := rawDB(t, path).Query(`SELECT id, cents, cancelled, run, seq FROM orders ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, run string
		var cents, cancelled, seq int64
		if err := rows.Scan(&id, &cents, &cancelled, &run, &seq); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s:%d:%d:%s/%d", id, cents, cancelled, run, seq))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, " ")
}

func TestARouterCallsTheHandlerOfEachLinesTypeWithItsDataDecoded(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	r := ordersRouter(t, in)
	rep, err := in.Apply(context.Background(), [][]byte{
		event("r", 1, "order_placed", `{"id":"o-1","cents":250}`),
		event("s", 1, "order_placed", `{"id":"o-2","cents":99,"currency":"EUR"}`),
		event("r", 2, "order_cancelled", `{"id":"o-1"}`),
	}, r.Route)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inbox.Report{Applied: 3}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if got, want := orders(t, path), "o-1:250:1:r/1 o-2:99:0:s/1"; got != want {
		t.Errorf("orders %q, want %q", got, want)
	}
}

func TestARouterStopsTheCallAtAnUnknownTypeByDefault(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	r := ordersRouter(t, in)
	call := [][]byte{event("r", 1, "order_placed", `{"id":"o-1","cents":1}`), event("s", 1, "refund_issued", `{}`)}
	rep, err := in.Apply(context.Background(), call, r.Route)
	if !errors.Is(err, inbox.ErrUnknownType) || errors.Is(err, inbox.ErrQuarantine) {
		t.Fatalf("Apply: %v, want ErrUnknownType alone", err)
	}
	if !strings.Contains(err.Error(), `"refund_issued"`) || !strings.Contains(err.Error(), `run "s" seq 1`) {
		t.Errorf("%q does not name the type, the run and the seq", err)
	}
	if rep != (inbox.Report{}) || orders(t, path) != "" || position(t, in, "r") != 0 || len(quarantined(t, in)) != 0 {
		t.Errorf("something of a stopped call was stored: %+v, orders %q", rep, orders(t, path))
	}
	// A consumer that knows the type applies the same lines as if nothing had happened.
	r.Handle("refund_issued", func(context.Context, *sql.Tx, inbox.Event) error { return nil })
	if rep, err := in.Apply(context.Background(), call, r.Route); err != nil || rep.Applied != 2 {
		t.Fatalf("after the type has a handler: %+v, %v", rep, err)
	}
}

func TestARouterToldToQuarantinesTheRunOfAnUnknownTypeAndTheOtherRunsGoOn(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	r := ordersRouter(t, in, inbox.WithUnknownType(inbox.UnknownQuarantine))
	rep, err := in.Apply(context.Background(), [][]byte{
		event("s", 1, "refund_issued", `{}`),
		event("r", 1, "order_placed", `{"id":"o-1","cents":1}`),
		event("s", 2, "order_placed", `{"id":"o-2","cents":2}`),
	}, r.Route)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inbox.Report{Applied: 1, Quarantined: 2}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	qs := quarantined(t, in)
	if len(qs) != 1 || qs[0].RunID != "s" || qs[0].Reason != "handler" || !strings.Contains(qs[0].Detail, `"refund_issued"`) {
		t.Errorf("quarantined %+v, want run s for its unknown type", qs)
	}
	if got := orders(t, path); got != "o-1:1:0:r/1" {
		t.Errorf("orders %q", got)
	}
}

func TestARouterToldToIgnoreAnUnknownTypeCountsTheLineAppliedAndWritesNothing(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	r := ordersRouter(t, in, inbox.WithUnknownType(inbox.UnknownIgnore))
	call := [][]byte{event("r", 1, "audit_note", `"x"`), event("r", 2, "order_placed", `{"id":"o-1","cents":1}`)}
	rep, err := in.Apply(context.Background(), call, r.Route)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inbox.Report{Applied: 2}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if p := position(t, in, "r"); p != 2 {
		t.Errorf("run r at %d, want 2", p)
	}
	if got := orders(t, path); got != "o-1:1:0:r/2" {
		t.Errorf("orders %q", got)
	}
	if rep, err := in.Apply(context.Background(), call[:1], r.Route); err != nil || rep.Duplicates != 1 {
		t.Errorf("the ignored line again: %+v, %v; want a duplicate", rep, err)
	}
}

func TestDataThatDoesNotDecodeQuarantinesItsRunAndTheOtherRunsGoOn(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	r := ordersRouter(t, in)
	rep, err := in.Apply(context.Background(), [][]byte{
		event("r", 1, "order_placed", `{"id":"o-1","cents":"a lot"}`),
		event("s", 1, "order_placed", `{"id":"o-2","cents":2}`),
		event("r", 2, "order_placed", `{"id":"o-3","cents":3}`),
	}, r.Route)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(inbox.Report{Applied: 1, Quarantined: 2}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	qs := quarantined(t, in)
	if len(qs) != 1 || qs[0].RunID != "r" || qs[0].Expected != 1 || !strings.Contains(qs[0].Detail, "orderPlaced") || !strings.Contains(qs[0].Detail, "cents") {
		t.Errorf("quarantined %+v, want run r, naming the type and the member", qs)
	}
	if got := orders(t, path); got != "o-2:2:0:s/1" {
		t.Errorf("orders %q", got)
	}
}

func TestALineARouterCannotReadATypeFromQuarantinesItsRun(t *testing.T) {
	t.Parallel()
	for name, l := range map[string]string{
		"no type":        `{"engine_run_id":"r","seq":1,"data":{}}`,
		"a numeric type": `{"engine_run_id":"r","seq":1,"type":7,"data":{}}`,
		"a null type":    `{"engine_run_id":"r","seq":1,"type":null,"data":{}}`,
		"an object type": `{"engine_run_id":"r","seq":1,"type":{"a":1},"data":{}}`,
		"an array type":  `{"engine_run_id":"r","seq":1,"type":["order_placed"],"data":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, _ := setup(t)
			r := ordersRouter(t, in)
			rep, err := in.Apply(context.Background(), [][]byte{[]byte(l), event("s", 1, "order_placed", `{"id":"o","cents":1}`)}, r.Route)
			if err != nil {
				t.Fatal(err)
			}
			if rep != (inbox.Report{Applied: 1, Quarantined: 1}) {
				t.Errorf("report %+v", rep)
			}
			if qs := quarantined(t, in); len(qs) != 1 || qs[0].RunID != "r" {
				t.Errorf("quarantined %+v", qs)
			}
		})
	}
}

func TestDecodeGivesTheZeroValueForNullOrMissingData(t *testing.T) {
	t.Parallel()
	in, _ := setup(t)
	var got []string
	r := inbox.NewRouter()
	r.Handle("p", inbox.Decode(func(_ context.Context, _ *sql.Tx, ev inbox.Event, v *orderPlaced) error {
		got = append(got, fmt.Sprintf("%d:%v", ev.Seq, v))
		return nil
	}))
	r.Handle("s", inbox.Decode(func(_ context.Context, _ *sql.Tx, ev inbox.Event, v orderPlaced) error {
		got = append(got, fmt.Sprintf("%d:%+v", ev.Seq, v))
		return nil
	}))
	_, err := in.Apply(context.Background(), [][]byte{
		event("r", 1, "p", `null`),
		[]byte(`{"engine_run_id":"r","seq":2,"type":"s"}`),
		event("r", 3, "s", `null`),
	}, r.Route)
	if err != nil {
		t.Fatal(err)
	}
	if want := "[1:<nil> 2:{ID: Cents:0} 3:{ID: Cents:0}]"; fmt.Sprint(got) != want {
		t.Errorf("got %v, want %s", got, want)
	}
}

func TestAHandlerErrorFromARoutedHandlerIsTheInboxsToHandle(t *testing.T) {
	t.Parallel()
	in, _ := setup(t, inbox.WithRetry(1, nil))
	calls := 0
	r := inbox.NewRouter()
	r.Handle("p", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, orderPlaced) error {
		calls++
		return errors.New("the ledger service is away")
	}))
	rep, err := in.Apply(context.Background(), [][]byte{event("r", 1, "p", `{}`), event("s", 1, "other", `{}`)}, r.Route)
	if err != nil {
		t.Fatal(err)
	}
	// The handler's error is retried then quarantines r; the unknown type stops nothing here either:
	// under WithRetry it too is retried, then quarantines its run.
	if calls != 2 || rep != (inbox.Report{Quarantined: 2}) {
		t.Errorf("%d calls, report %+v", calls, rep)
	}
	if qs := quarantined(t, in); len(qs) != 2 {
		t.Errorf("quarantined %+v", qs)
	}
}

func TestHandlingATypeTwiceAnEmptyTypeOrANilHandlerPanicsAtSetup(t *testing.T) {
	t.Parallel()
	nop := func(context.Context, *sql.Tx, inbox.Event) error { return nil }
	for name, f := range map[string]func(r *inbox.Router){
		"twice": func(r *inbox.Router) { r.Handle("a", nop); r.Handle("a", nop) },
		"empty": func(r *inbox.Router) { r.Handle("", nop) },
		"nil":   func(r *inbox.Router) { r.Handle("a", nil) },
	} {
		func() {
			defer func() {
				if v := recover(); v == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f(inbox.NewRouter())
		}()
	}
}

func TestARouterHandlerReturningErrQuarantineUnderRetryRunsOnceAndParksTheRun(t *testing.T) {
	t.Parallel()
	in, path := setup(t, inbox.WithRetry(5, nil))
	calls := 0
	r := inbox.NewRouter()
	r.Handle("t", func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		if err := insertHandler(ctx, tx, ev); err != nil {
			return err
		}
		if ev.RunID == "r" && ev.Seq == 2 {
			calls++
			return errors.Join(errors.New("bad order"), inbox.ErrQuarantine)
		}
		return nil
	})
	rep, err := in.Apply(context.Background(), [][]byte{line("r", 1), line("r", 2), line("r", 3), line("s", 1)}, r.Route)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || rep.Applied != 2 || rep.Quarantined != 2 {
		t.Errorf("calls %d, report %+v", calls, rep)
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 2 {
		t.Errorf("%d rows, want 2", n)
	}
}

type cannotHold struct {
	name string
	h    inbox.Handler
}

func TestDecodeIntoATypeThatCannotHoldTheDataParksTheRunAndTheOthersApply(t *testing.T) {
	t.Parallel()
	called := false
	mark := func() { called = true }
	cases := []cannotHold{
		{"chan", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, chan int) error { mark(); return nil })},
		{"func", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, func()) error { mark(); return nil })},
		{"io.Reader", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, io.Reader) error { mark(); return nil })},
		{"int8", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, int8) error { mark(); return nil })},
		{"struct of int64", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, struct{ N int64 }) error { mark(); return nil })},
		{"map of chans", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, map[string]chan int) error { mark(); return nil })},
		{"complex128", inbox.Decode(func(context.Context, *sql.Tx, inbox.Event, complex128) error { mark(); return nil })},
	}
	datas := map[string]string{
		"chan": `{"a":1}`, "func": `"x"`, "io.Reader": `{"a":1}`, "int8": `1e400`,
		"struct of int64": `{"N":123456789012345678901234567890}`, "map of chans": `{"a":1}`, "complex128": `1`,
	}
	for _, c := range cases {
		called = false
		in, _ := setup(t)
		bad := []byte(`{"engine_run_id":"r","seq":1,"type":"t","data":` + datas[c.name] + `}`)
		r := inbox.NewRouter()
		r.Handle("t", c.h)
		rep, err := in.Apply(context.Background(), [][]byte{bad}, r.Route)
		if err != nil || rep.Quarantined != 1 || called {
			t.Errorf("%s: %+v, %v (called %v), want the run quarantined", c.name, rep, err, called)
		}
	}
}
