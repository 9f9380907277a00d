package clickhouse

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
)

// retryableCode reports the server error codes that are transient.
func retryableCode(code int32) bool {
	switch code {
	case 3, // UNEXPECTED_END_OF_FILE
		159, // TIMEOUT_EXCEEDED
		202, // TOO_MANY_SIMULTANEOUS_QUERIES
		203, // NO_FREE_CONNECTION
		209, // SOCKET_TIMEOUT
		210, // NETWORK_ERROR
		225, // NO_ZOOKEEPER
		241, // MEMORY_LIMIT_EXCEEDED
		242, // TABLE_IS_READ_ONLY
		252, // TOO_MANY_PARTS
		319, // UNKNOWN_STATUS_OF_INSERT
		394, // QUERY_WAS_CANCELLED (server shutting down)
		425, // SYSTEM_ERROR
		999: // KEEPER_EXCEPTION
		return true
	}
	return false
}

// Retryable reports whether err is worth retrying: network failures
// (connection refused or reset, EOF, timeouts: the server restarting) and the
// server's transient errors (too many parts, timeouts, network, memory).
// Every other server exception (schema mismatch such as 16, 47, 60, 81;
// authentication 516, 192, 193; access 497; bad data) is fatal.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var ex *ch.Exception
	if errors.As(err, &ex) {
		return retryableCode(ex.Code)
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, ch.ErrAcquireConnTimeout) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}

// backoff yields exponentially growing delays with jitter.
type backoff struct {
	next, max time.Duration
}

// delay returns the next wait: uniformly random in [d/2, d], d doubling up
// to max.
func (b *backoff) delay() time.Duration {
	d := b.next
	if b.next < b.max {
		b.next = min(2*b.next, b.max)
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends (returning its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
