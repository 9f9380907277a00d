package kafkarun

import "time"

// txnSize adapts the keying stage's poll size (the source records of one
// transaction) so that a transaction stays well inside
// kafka.transaction_timeout: a transaction that took more than a quarter of
// it halves the next one's size, or cuts it to what its rate keys in an
// eighth of the timeout when that is less (never below minTxnRecords; a
// transaction that failed counts with the time its keying took), and a full one
// that took less than a twentieth doubles it again, up to
// kafka.transaction_records. Only the keying goroutine uses it.
type txnSize struct {
	max     int           // kafka.transaction_records
	timeout time.Duration // kafka.transaction_timeout
	cur     int
}

// minTxnRecords is the smallest poll size txnSize shrinks to.
const minTxnRecords = 100

func newTxnSize(max int, timeout time.Duration) *txnSize {
	return &txnSize{max: max, timeout: timeout, cur: min(max, firstTxnRecords)}
}

// firstTxnRecords is the first transaction's size: how fast keying runs
// is not known yet (on a loaded machine the first transaction of a start
// with a backlog of kafka.transaction_records could outlive the timeout);
// fast full ones double it up to kafka.transaction_records.
const firstTxnRecords = 1000

// next returns the size of the next poll.
func (s *txnSize) next() int { return s.cur }

// observe records a transaction of n source records that took d.
func (s *txnSize) observe(n int, d time.Duration) {
	switch {
	case d > s.timeout/4:
		// At least halve; to what the observed rate keys in an eighth of
		// the timeout when that is less (a loaded machine: the first
		// transaction of a start can take several timeouts' worth).
		rated := int(float64(n) * float64(s.timeout/8) / float64(d))
		s.cur = max(min(min(s.cur, n)/2, rated), min(minTxnRecords, s.max))
	case d < s.timeout/20 && n >= s.cur:
		s.cur = min(s.cur*2, s.max)
	}
}
