package main

import (
	"context"
	"fmt"
	"io"
)

func demoCommand() command { return notYet("demo", "zero-setup demo on an in-process Kafka") }

func notYet(name, summary string) command {
	return command{name: name, summary: summary, run: func(context.Context, []string, io.Writer, io.Writer) error {
		return fmt.Errorf("cdcjoin %s: not available in this build", name)
	}}
}
