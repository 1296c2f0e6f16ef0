// SPDX-License-Identifier: Apache-2.0

package inbox_test

import (
	"context"
	"database/sql"
	"testing"
)

func TestReadTxRefusesAWrite(t *testing.T) {
	t.Parallel()
	in, path := setup(t)
	err := in.ReadTx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO applied (run, seq, line) VALUES ('x', 1, 'x')`)
		return err
	})
	if err == nil {
		t.Error("a write inside ReadTx succeeded")
	}
	if n := count(t, rawDB(t, path), `SELECT count(*) FROM applied`); n != 0 {
		t.Errorf("%d rows written through ReadTx", n)
	}
}
