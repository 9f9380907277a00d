// Package cerr wraps errors so that a message reads "cdcjoin: what: why"
// with the "cdcjoin:" prefix once, at the front, however many layers add
// their context: a wrapper drops the prefix of the error it wraps. The
// wrapped error stays reachable (errors.Is, errors.As).
package cerr

import (
	"fmt"
	"strings"
)

// Prefix starts every error message cdcjoin returns.
const Prefix = "cdcjoin: "

// Wrap returns err in the context of format and args: "cdcjoin: <context>:
// <err without its own cdcjoin: prefix>". Nil stays nil.
func Wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &wrapped{ctx: fmt.Sprintf(format, args...), err: err}
}

// Inner returns err in the context of format and args for a caller that
// adds its own context: "<context>: <err without its cdcjoin: prefix>".
func Inner(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &wrapped{ctx: fmt.Sprintf(format, args...), err: err, inner: true}
}

type wrapped struct {
	ctx   string
	err   error
	inner bool
}

func (w *wrapped) Error() string {
	msg := strings.TrimPrefix(w.err.Error(), Prefix)
	if w.inner {
		return w.ctx + ": " + msg
	}
	return Prefix + strings.TrimPrefix(w.ctx, Prefix) + ": " + msg
}

func (w *wrapped) Unwrap() error { return w.err }
