// Command cdcjoin keeps the JOIN of two Debezium-captured tables materialized.
//
// Run `cdcjoin help` for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string // after "cdcjoin <name> "
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// errUsage marks errors caused by wrong arguments (exit status 2).
var errUsage = errors.New("usage")

func commands() []command {
	return []command{
		replayCommand(),
		runCommand(),
		handoverCommand(),
		reemitCommand(),
		switchCommand(),
		demoCommand(),
		ddlCommand(),
		explainCommand(),
		benchCommand(),
		{name: "version", summary: "print the version", run: func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			fmt.Fprintln(stdout, "cdcjoin", version)
			return nil
		}},
	}
}

var version = "dev" // set with -ldflags "-X main.version=…"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			for _, c := range cmds {
				if c.name == args[1] {
					c.run(ctx, []string{"-h"}, stdout, stdout)
					return 0
				}
			}
		}
		printHelp(stdout, cmds)
		return 0
	}
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintln(stderr, err)
			return 2
		default:
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "cdcjoin: unknown command %q; run `cdcjoin help` for the list\n", args[0])
	return 2
}

func printHelp(w io.Writer, cmds []command) {
	fmt.Fprint(w, `cdcjoin keeps the JOIN of two database tables continuously materialized in
ClickHouse from Debezium change events (parent ⋈ child on child.parent_key = parent.key).

Usage:
  cdcjoin <command> [flags]

Commands:
`)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Run "cdcjoin help <command>" or "cdcjoin <command> -h" for a command's flags.
Quick start: "cdcjoin demo" runs a zero-setup demo on an in-process Kafka.
`)
}

// newFlags returns a FlagSet whose usage text names the command.
func newFlags(c *command, stderr io.Writer, long string) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: cdcjoin %s %s\n\n%s\n", c.name, c.usage, strings.TrimSpace(long))
		fmt.Fprintln(stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, turning flag errors into errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("cdcjoin %s: %v: %w", fs.Name(), err, errUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("cdcjoin %s: unexpected argument %q: %w", fs.Name(), fs.Arg(0), errUsage)
	}
	return nil
}
