package cerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cdcjoin/cdcjoin/internal/cerr"
)

func TestPrefixOnce(t *testing.T) {
	base := errors.New("cdcjoin: clickhouse: insert: connection refused")
	err := cerr.Wrap(cerr.Inner(cerr.Inner(base, "sink"), "keyed record %s/%d@%d", "k", 3, 17), "join partition %d", 3)
	want := "cdcjoin: join partition 3: keyed record k/3@17: sink: clickhouse: insert: connection refused"
	if err.Error() != want {
		t.Fatalf("got %q\nwant %q", err, want)
	}
	if !errors.Is(err, base) {
		t.Fatal("the wrapped error is not reachable")
	}
	if got := cerr.Wrap(fmt.Errorf("plain"), "cdcjoin: stage").Error(); got != "cdcjoin: stage: plain" {
		t.Fatalf("got %q", got)
	}
	if cerr.Wrap(nil, "x") != nil || cerr.Inner(nil, "x") != nil {
		t.Fatal("nil wrapped to non-nil")
	}
}
