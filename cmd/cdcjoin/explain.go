package main

import (
	"context"
	"fmt"
	"io"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/plan"
)

func explainCommand() command {
	c := command{
		name:    "explain",
		summary: "print a job's plan: stages, keys, conditions, state per stage",
		usage:   "--config FILE",
	}
	c.run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(&c, stderr, `
Prints how cdcjoin runs the job: for a query (tables + query), its inputs (a
table's topic, key and the columns kept), every stage (a binary join on its
join key, its kind after PostgreSQL's outer-join reduction, the conditions
pushed to each side, what each side stores and what it emits), the
materializer when rows can move between join keys, and the select list;
for the parent/child form, its one stage.`)
		cfgPath := fs.String("config", "", "job configuration (YAML) `file` (required)")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *cfgPath == "" {
			fs.Usage()
			return fmt.Errorf("cdcjoin explain: --config is required: %w", errUsage)
		}
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, explain(cfg))
		return nil
	}
	return c
}

// explain renders cfg's plan.
func explain(cfg *config.Config) string {
	p := cfg.Compiled()
	if p == nil {
		s := fmt.Sprintf("parent/child join, 1 stage: %s JOIN of %s (key %v) and %s on (%v) = (%v)\n",
			cfg.Join, cfg.Parent.Topic, cfg.Parent.Key, cfg.Child.Topic, cfg.Child.ParentKey, cfg.Parent.Key)
		s += "  state: parent (join key → row), children (join key, child key → row), child index (child key → join key, row)\n"
		return s
	}
	info := map[string]plan.TableInfo{}
	for name, t := range cfg.Tables {
		info[name] = plan.TableInfo{Topic: t.Topic}
	}
	head := ""
	if cfg.Plan() == nil {
		head = "runs as the parent/child join (the two-table shape of a foreign key to a primary key; bulk loads, salting and handover apply)\n"
	}
	return head + plan.Explain(p, info)
}
