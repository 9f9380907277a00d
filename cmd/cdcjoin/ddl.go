package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/cdcjoin/cdcjoin/config"
	"github.com/cdcjoin/cdcjoin/debezium"
	"github.com/cdcjoin/cdcjoin/engine"
	"github.com/cdcjoin/cdcjoin/job"
	"github.com/cdcjoin/cdcjoin/plan"
	"github.com/cdcjoin/cdcjoin/registry"
	"github.com/cdcjoin/cdcjoin/row"
	"github.com/cdcjoin/cdcjoin/sink/clickhouse"
)

func ddlCommand() command {
	c := command{
		name:    "ddl",
		summary: "print the ClickHouse DDL (table and view) for a config",
		usage:   "--config FILE [--sample FILE] [--server VERSION] [--purge]",
	}
	c.run = func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlags(&c, stderr, `
Prints the statements cdcjoin runs to create its ClickHouse output (database,
table and, in upsert mode, the <table>_current view), so that a DBA can
create them by hand (then set clickhouse.create_table: false).

Column types come from clickhouse.columns overrides, else from the Debezium
schemas of --sample (a file in replay input format; the first records with a
schema of each topic are used), else from defaults (Nullable(String)).

With clickhouse.cluster the statements run ON CLUSTER and the table is
Replicated*. --purge prints instead the statements that purge deleted rows
(upsert mode, 23.12+: OPTIMIZE TABLE … FINAL CLEANUP); run them on the
schedule sink/clickhouse/README.md describes.`)
		cfgPath := fs.String("config", "", "job configuration (YAML) `file` (required; needs a clickhouse section)")
		sample := fs.String("sample", "", "records in replay input format to take column types from (`file`)")
		server := fs.String("server", "latest", "ClickHouse server `version` to write the DDL for, e.g. 18.16 or 24.8")
		purge := fs.Bool("purge", false, "print the statements that purge deleted rows instead")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *cfgPath == "" {
			fs.Usage()
			return fmt.Errorf("cdcjoin ddl: --config is required: %w", errUsage)
		}
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			return err
		}
		srv, err := parseServer(*server)
		if err != nil {
			return err
		}
		if *purge {
			if cfg.ClickHouse == nil {
				return fmt.Errorf("cdcjoin ddl: %s has no clickhouse section", *cfgPath)
			}
			stmts, err := clickhouse.Purge(cfg.ClickHouse, srv)
			if err != nil {
				return err
			}
			for _, s := range stmts {
				fmt.Fprintf(stdout, "%s;\n", s)
			}
			return nil
		}
		var types []row.ColumnType
		if *sample != "" {
			if types, err = sampleTypes(cfg, *sample); err != nil {
				return err
			}
		}
		stmts, err := clickhouse.DDL(cfg, types, srv)
		if err != nil {
			return err
		}
		if p := cfg.Plan(); p != nil {
			pk, ck := plan.KeyColumns(p)
			fmt.Fprintf(stdout, "-- Row key: _pk = the key of %s; _ck = the keys of %s (NULL where an outer join pads the table).\n\n", pk, ck)
		}
		for _, s := range stmts {
			fmt.Fprintf(stdout, "%s;\n\n", strings.TrimSpace(s))
		}
		return nil
	}
	return c
}

func parseServer(s string) (clickhouse.Server, error) {
	if s == "latest" || s == "" {
		return clickhouse.LatestServer(), nil
	}
	major, minor, _ := strings.Cut(s, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(strings.SplitN(minor+".0", ".", 2)[0])
	if err1 != nil || (minor != "" && err2 != nil) {
		return clickhouse.Server{}, fmt.Errorf("cdcjoin ddl: --server %q: use MAJOR.MINOR, e.g. 23.8: %w", s, errUsage)
	}
	return clickhouse.Server{Major: ma, Minor: mi}, nil
}

// sampleTypes decodes records of path until both sides' schemas were seen
// (or the file ends) and returns the select list's column types.
func sampleTypes(cfg *config.Config, path string) ([]row.ColumnType, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cdcjoin: %w", err)
	}
	defer f.Close()
	if cfg.Plan() != nil {
		return samplePlanTypes(cfg, f, path)
	}
	spec, err := job.Spec(cfg)
	if err != nil {
		return nil, err
	}
	schemas, err := job.OpenSchemas(cfg, registry.Options{})
	if err != nil {
		return nil, err
	}
	defer schemas.Close()
	dec := job.NewDecoder(cfg, spec, schemas)
	var types job.Types
	var ev debezium.Event
	errDone := errors.New("done")
	err = engine.ReadJSONL(f, path, func(r *engine.Record) error {
		side, ok, err := dec.DecodeHeaders(r.Topic, r.Partition, r.Offset, r.Key, r.Value, r.Headers, &ev)
		if err != nil || !ok {
			return nil // a sample: skip what does not help
		}
		types.Observe(side, &ev)
		if types.Complete() {
			return errDone
		}
		return nil
	})
	if err != nil && err != errDone {
		return nil, err
	}
	return types.Output(spec), nil
}

// samplePlanTypes is sampleTypes for a plan: every FROM item's schema.
func samplePlanTypes(cfg *config.Config, f io.Reader, path string) ([]row.ColumnType, error) {
	dec := job.NewPlanDecoder(cfg)
	var types job.PlanTypes
	var ev debezium.Event
	seen := map[int]bool{}
	errDone := errors.New("done")
	err := engine.ReadJSONL(f, path, func(r *engine.Record) error {
		for _, it := range dec.Items(r.Topic) {
			ok, err := dec.Decode(it, r.Topic, r.Partition, r.Offset, r.Key, r.Value, &ev)
			if err != nil || !ok || ev.Types == nil {
				continue
			}
			types.Observe(it, &ev)
			seen[it] = true
		}
		if len(seen) == len(dec.Plan().Tables) {
			return errDone
		}
		return nil
	})
	if err != nil && err != errDone {
		return nil, err
	}
	return types.Output(dec.Plan()), nil
}
