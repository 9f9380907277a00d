package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcjoin/cdcjoin/cdcgen"
	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/row"
)

// TestParentChildAsSQL: the same history through the parent/child form,
// its SQL equivalent (which runs on the same core) and that query forced
// onto the multi-stage core gives byte-identical --final output (the JSON
// objects in row-key order), INNER and LEFT.
func TestParentChildAsSQL(t *testing.T) {
	for _, join := range []string{"inner", "left"} {
		ss := seeds(t)[:2]
		if testing.Short() {
			ss = ss[:1]
		}
		for _, seed := range ss {
			t.Run(fmt.Sprintf("%s/seed=%d", join, seed), func(t *testing.T) {
				t.Parallel()
				opts := cdcgen.DefaultOptions(seed)
				opts.Ops = 3000
				if testing.Short() {
					opts.Ops = 1500
				}
				h, err := cdcgen.Generate(opts)
				if err != nil {
					t.Fatal(err)
				}
				kind := "JOIN"
				if join == "left" {
					kind = "LEFT JOIN"
				}
				sqlCfg, err := config.Parse([]byte(`name: oracle
tables:
  users: {topic: `+cdcgen.DefaultParentTopic+`, key: id}
  domains: {topic: `+cdcgen.DefaultChildTopic+`, key: id}
query: SELECT u.id AS user_id, u.firstname, u.lastname, d.id AS domain_id, d.domain_name FROM users u `+kind+` domains d ON d.user_id = u.id
state: {dir: /state, batch_events: 100}
`), "sql.yaml")
				if err != nil {
					t.Fatal(err)
				}
				if sqlCfg.Plan() != nil {
					t.Fatal("the parent/child shape should run as parent/child")
				}
				var finals [][]byte
				for _, cfg := range []*config.Config{jobConfig(t, join), sqlCfg, sqlCfg.AsPlan()} {
					e, err := engine.Open(cfg, engine.Options{FS: vfs.NewMem()})
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range h.Records {
						rec := engine.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value}
						if err := e.Process(context.Background(), &rec); err != nil {
							t.Fatal(err)
						}
					}
					if err := e.Commit(context.Background()); err != nil {
						t.Fatal(err)
					}
					var buf bytes.Buffer
					names := cfg.OutputNames()
					err = e.Final(func(_, _, vals []row.Value) error {
						buf.Write(row.AppendJSONObject(nil, names, vals))
						buf.WriteByte('\n')
						return nil
					})
					e.Close()
					if err != nil {
						t.Fatal(err)
					}
					finals = append(finals, buf.Bytes())
				}
				if len(finals[0]) == 0 {
					t.Fatal("empty join")
				}
				for i, what := range []string{"", "the SQL form", "the SQL form on the multi-stage core"} {
					if i > 0 && !bytes.Equal(finals[0], finals[i]) {
						t.Errorf("%s: --final differs from the parent/child form's (%d vs %d bytes)", what, len(finals[i]), len(finals[0]))
					}
				}
			})
		}
	}
}
