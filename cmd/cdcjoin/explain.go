package main

import (
	"context"
	"fmt"
	"io"
	"strings"

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
for the parent/child form, its one stage; for a time join (time_join, or
tables with time + query), its kind and bound, inputs, watermark
settings, state and when rows are emitted.`)
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
	if cfg.IsTimeJoin() {
		return explainTime(cfg)
	}
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

// explainTime renders a time join (either form): its kind and bound,
// inputs, watermark settings, what state holds and when rows are emitted
// and retired.
func explainTime(cfg *config.Config) string {
	tj := cfg.TimeJoin
	var b strings.Builder
	form := "time_join"
	if cfg.TimeSQL() {
		form = "the query (tables with time)"
	}
	fmt.Fprintf(&b, "time join (%s), 1 stage: %s %s JOIN", form, tj.Kind, strings.ToUpper(string(cfg.Join)))
	switch tj.Kind {
	case config.KindInterval:
		fmt.Fprintf(&b, ", left.%s + %v <= right.%s <= left.%s + %v (inclusive)\n", tj.Left.Time, *tj.Lower, tj.Right.Time, tj.Left.Time, *tj.Upper)
	case config.KindWindow:
		fmt.Fprintf(&b, ", windows of %v sliding by %v\n", tj.Window.Size, tj.Window.Slide)
	default:
		fmt.Fprintf(&b, ", each left row with the right version valid at left.%s\n", tj.Left.Time)
	}
	for _, s := range []struct {
		name string
		side *config.TimeSide
	}{{"left", &tj.Left}, {"right", &tj.Right}} {
		typ := s.side.Types[s.side.Time]
		if typ == "" {
			typ = "undeclared"
		}
		fmt.Fprintf(&b, "  %s: topic %s (%s), key %v, time %s (%s)\n", s.name, s.side.Topic, s.side.Format, []string(s.side.Key), s.side.Time, typ)
	}
	idle := "a partition is never idle"
	if tj.IdleTimeout > 0 {
		idle = fmt.Sprintf("a partition is idle after %v without a record", tj.IdleTimeout)
	}
	fmt.Fprintf(&b, "  watermark: min over the non-idle source partitions of max(time) - %v; %s; late below watermark - %v (a bad record, reason late)\n",
		tj.OutOfOrderness, idle, tj.AllowedLateness)
	if tj.Kind == config.KindTemporal {
		b.WriteString("  state: left rows (join key, time, pk → row) until emitted; right versions (pk, time → row), older ones retired below the watermark\n")
	} else {
		b.WriteString("  state: per side (join key, time, pk → row), a row retired once the watermark shows no partner can still arrive; timers in memory, rebuilt on load\n")
	}
	switch tj.Kind {
	case config.KindInterval:
		b.WriteString("  emits: a pair as soon as both rows are there")
		if cfg.Join != config.Inner {
			b.WriteString("; an unmatched outer row, NULL-padded, when the watermark passes its bound")
		}
		b.WriteString("\n")
	case config.KindWindow:
		b.WriteString("  emits: a window's pairs when the watermark passes its end\n")
	default:
		b.WriteString("  emits: a left row when the watermark passes its time\n")
	}
	names := cfg.OutputNames()
	b.WriteString("  select:")
	for i, s := range cfg.Select {
		col := s.Table + "." + s.Column
		if s.Column != names[i] {
			col += " AS " + names[i]
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(" " + col)
	}
	b.WriteString("\n")
	return b.String()
}
