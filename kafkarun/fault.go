package kafkarun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcjoin/cdcjoin/config"
)

// Kafka faults of the stages.
//
// A stage's Kafka client can fail in ways the client does not recover from
// by itself: a broker restart in the middle of a transaction, a group
// session lost while a poll holds off rebalances, a transaction the broker
// aborted at its timeout. Such a failure is restartable: the stage drops
// what it had not committed, closes its client and starts over from what
// it committed, with a new client — what a restart of the process would
// do, and what the kill tests show to be exact. A stage that keeps failing
// without making progress for persistentErrors stops Run with the last
// error; until then the failure shows in the readiness answer, and once
// the stage has been without progress for longer than its stall limit in
// the liveness answer too (stageHealth).
//
// Errors that a new client cannot fix (authorization, a fenced
// transactional id of another live instance, a recreated topic, a record
// too large) are not restartable: they stop Run at once.

// restartable marks a Kafka failure after which the stage starts over.
type restartable struct{ err error }

func (e *restartable) Error() string { return e.err.Error() }
func (e *restartable) Unwrap() error { return e.err }

// Restart backoff of a failing stage (doubling up to the max; reset by
// progress).
const (
	restartBackoff    = 100 * time.Millisecond
	maxRestartBackoff = 5 * time.Second
)

// txnGrace is how long past kafka.transaction_timeout a transaction's
// calls may still take (its End): by then the broker has aborted it.
const txnGrace = 5 * time.Second

// kafkaFault classifies err, returned by a Kafka call: restartable unless
// it is one a new client cannot fix.
func kafkaFault(err error) error {
	if err == nil || permanentKafka(err) {
		return err
	}
	var re *restartable
	if errors.As(err, &re) {
		return err
	}
	return &restartable{err}
}

// permanentKafka reports whether err is a Kafka error that restarting a
// stage cannot fix.
func permanentKafka(err error) bool {
	for _, e := range []error{
		kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed, kerr.ClusterAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed, kerr.SaslAuthenticationFailed, kerr.DelegationTokenAuthorizationFailed,
		kerr.UnknownTopicID, kerr.InconsistentTopicID, kerr.InvalidTopicException,
		kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.CorruptMessage,
		kerr.UnsupportedVersion, kerr.UnsupportedForMessageFormat, kerr.InvalidConfig, kerr.PolicyViolation,
		kerr.InvalidTransactionTimeout, kerr.TransactionalIDNotFound, kerr.InvalidSessionTimeout,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// kafkaFault classifies an error of the keying transaction begun at began:
// a fenced producer within the transaction's timeout is another live
// instance with the same instance id (fatal, with what to do); past it, the
// broker aborted the transaction at its timeout and bumped the producer's
// epoch (restartable).
func (k *keying) kafkaFault(err error, began time.Time) error {
	if isFenced(err) {
		if time.Since(began) < k.cfg.Kafka.TransactionTimeout {
			return fenced(err, &k.cfg.Kafka, k.txid)
		}
		return &restartable{fmt.Errorf("%w (the transaction outlived kafka.transaction_timeout %v; the broker aborted it)", err, k.cfg.Kafka.TransactionTimeout)}
	}
	return kafkaFault(err)
}

func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.InvalidTxnState)
}

// drainContext returns a context for work that must finish even when ctx
// is done (a transaction in progress at shutdown): it ends drain after ctx
// is done, and at deadline in any case.
func drainContext(ctx context.Context, deadline time.Time, drain time.Duration) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(drain, cancel) })
	return dctx, func() {
		stop()
		cancel()
	}
}

// stageHealth is what a stage reports about its progress (safe for
// concurrent use: the stage's goroutine writes, the health endpoints read).
type stageHealth struct {
	mu        sync.Mutex
	progress  time.Time // the last commit (or poll that found nothing to do)
	failure   error     // the last failure since then (nil: none)
	failedAt  time.Time
	busySince time.Time // the transaction in progress began (zero: none)
}

func (h *stageHealth) progressed(now time.Time) {
	h.mu.Lock()
	h.progress, h.failure = now, nil
	h.mu.Unlock()
}

func (h *stageHealth) failed(now time.Time, err error) {
	h.mu.Lock()
	h.failure, h.failedAt = err, now
	h.mu.Unlock()
}

func (h *stageHealth) busy(since time.Time) {
	h.mu.Lock()
	h.busySince = since
	h.mu.Unlock()
}

func (h *stageHealth) lastProgress() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.progress
}

// notReady says why the stage is not making progress (nil: it is, as far
// as it knows).
func (h *stageHealth) notReady(stage string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failure != nil {
		return fmt.Errorf("%s stage: Kafka failing (last %v ago, no progress for %v): %w",
			stage, time.Since(h.failedAt).Round(time.Second), time.Since(h.progress).Round(time.Second), h.failure)
	}
	return nil
}

// stalled reports a stage without progress for longer than limit that has
// work (a failure, or a transaction in progress): an idle stage polls and
// counts as progressing.
func (h *stageHealth) stalled(stage string, now time.Time, limit time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch d := now.Sub(h.progress); {
	case h.failure != nil && d > limit:
		return fmt.Errorf("%s stage: no progress for %v (more than %v): %w", stage, d.Round(time.Second), limit, h.failure)
	case !h.busySince.IsZero() && now.Sub(h.busySince) > limit:
		return fmt.Errorf("%s stage: one transaction for %v (more than %v)", stage, now.Sub(h.busySince).Round(time.Second), limit)
	}
	return nil
}

// probeInterval is how often Run checks that the brokers answer (a
// metadata request): an idle stage's client retries quietly, so a broker
// that is away shows nowhere else until work arrives.
const probeInterval = 2 * time.Second

// probe checks the brokers every probeInterval until ctx is done,
// recording the outcome in h.
func probe(ctx context.Context, ping func(context.Context) error, h *stageHealth) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := ping(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			h.failed(time.Now(), fmt.Errorf("the brokers do not answer: %w", err))
		default:
			h.progressed(time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// closeGroupClient leaves cl's group (revoke callbacks run) and closes it,
// waiting at most d for the group to be left: franz-go's Close waits for a
// LeaveGroup the broker may never answer (a broker that is away, a group
// in a rebalance that does not end), which held shutdowns for minutes.
func closeGroupClient(cl *kgo.Client, d time.Duration) {
	cl.AllowRebalance()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	cl.LeaveGroupContext(ctx)
	cancel()
	cl.Close()
}

// leaveTimeout bounds leaving a group on close.
func leaveTimeout(cfg *config.Config) time.Duration { return cfg.Kafka.DrainTimeout + 5*time.Second }
