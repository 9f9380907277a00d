package demo_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/cdcjoin/cdcjoin/demo"
)

var update = flag.Bool("update", false, "rewrite testdata/demo.golden")

func TestDemoGolden(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := demo.Run(ctx, &out, demo.Options{StateDir: t.TempDir()}); err != nil {
		t.Fatalf("demo: %v\noutput so far:\n%s", err, out.String())
	}
	const golden = "testdata/demo.golden"
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		t.Errorf("demo output differs from %s (run with -update after checking):\n--- got\n%s\n--- want\n%s", golden, out.String(), want)
	}
}
