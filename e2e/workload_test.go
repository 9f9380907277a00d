package e2e

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"testing"

	"github.com/cdcjoin/cdcjoin/internal/testenv"
)

var testSize = Size{BaseUsers: 30, BaseDomains: 100, HotDomains: 200, RandomTxs: 150, ToastBytes: 3000}

func plan(seed uint64) (*Workload, []Tx) {
	w := NewWorkload(seed, testSize)
	txs := w.BaseLoad()
	txs = append(txs, w.Scripted()...)
	txs = append(txs, w.HotUser())
	txs = append(txs, w.Random(testSize.RandomTxs)...)
	txs = append(txs, w.HotRename(), w.Marker(1))
	return w, txs
}

func TestWorkloadDeterministic(t *testing.T) {
	_, a := plan(7)
	_, b := plan(7)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different workloads")
	}
	_, c := plan(8)
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same workload")
	}
}

// TestWorkloadOnPostgres applies seeded workloads to a real PostgreSQL and
// checks that every statement succeeds and that the workload's model
// predicts PostgreSQL's INNER and LEFT joins (so that the e2e's statements
// hit what they mean to hit: FK moves, key changes, deletes).
func TestWorkloadOnPostgres(t *testing.T) {
	dsn := testenv.Require(t, testenv.PostgresEnv, "PostgreSQL")
	ctx := context.Background()
	const db = "e2e_workload_test"
	if err := RecreateDatabase(ctx, dsn, db, "../deploy/local/schema.sql"); err != nil {
		t.Fatal(err)
	}
	tdsn, err := WithDatabase(dsn, db)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if err := RecreateDatabase(ctx, dsn, db, "../deploy/local/schema.sql"); err != nil {
				t.Fatal(err)
			}
			pg, err := OpenPostgres(ctx, tdsn)
			if err != nil {
				t.Fatal(err)
			}
			defer pg.Close(ctx)
			w, txs := plan(seed)
			var changed int64
			for _, tx := range txs {
				n, txid, err := pg.Apply(ctx, tx)
				if err != nil {
					t.Fatal(err)
				}
				if txid <= 0 {
					t.Fatalf("%q: txid %d", tx.Name, txid)
				}
				changed += n
			}
			if changed < int64(testSize.BaseUsers+testSize.BaseDomains+testSize.HotDomains) {
				t.Fatalf("only %d rows changed", changed)
			}
			for _, left := range []bool{false, true} {
				rows, err := pg.Join(ctx, left)
				if err != nil {
					t.Fatal(err)
				}
				var got [][2]int64
				for _, r := range rows {
					u, _ := strconv.ParseInt(r[0].Text, 10, 64)
					d := int64(-1)
					if !r[3].Null {
						d, _ = strconv.ParseInt(r[3].Text, 10, 64)
					}
					got = append(got, [2]int64{u, d})
				}
				if want := w.Expected(left); !reflect.DeepEqual(got, want) {
					t.Fatalf("left=%v: PostgreSQL has %d join rows, the model %d", left, len(got), len(want))
				}
			}
		})
	}
}
