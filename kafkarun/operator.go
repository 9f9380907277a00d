package kafkarun

import (
	"time"

	"github.com/cdcjoin/cdcjoin/keyed"
	"github.com/cdcjoin/cdcjoin/skew"
)

// The join stage's operator (the wiring of the operator contract, package
// driver): every worker joins its
// partition through a skew.Router, which does fan-outs in chunks between
// other keys' records (paced: about half of the worker's time while both
// have work) and salts hot keys across keyed partitions. The router's
// records (forwards to replicas, layout proposals, release confirmations)
// go through the worker's forwarder in one Kafka transaction per batch,
// committed after the sink flush and before the state commit. How steps
// fit the worker's batches: see worker.
//
// Kafka offset commits (the emit threshold of a future owner of the
// partition) are made only at positions where the worker had no work in
// progress: a future owner rebuilding below that offset applies everything
// at once without emitting and, reaching it, is exactly where the previous
// owner was, with nothing owed to the sink.

// idleQuantum is how long a worker steps its work in progress per batch
// when no input is waiting.
const idleQuantum = 20 * time.Millisecond

// newRouter makes the worker's router (its forwarder too) and loads what
// its state holds. fresh: the state is new (child counts are exact).
func (w *worker) newRouter(t keyed.State, fresh bool) error {
	j := w.j
	sk := &j.cfg.Skew
	cfg := skew.RouterConfig{Partition: w.p, Partitions: j.top.keyedParts, Hot: int64(sk.Hot()), Cool: int64(sk.Cool()),
		Salts: sk.SaltsFor(int(j.top.keyedParts)), Chunk: sk.ChunkRows}
	w.fwd = newForwarder(j, w.p)
	w.router = skew.NewRouter(j.spec, cfg)
	w.router.OnLayout = func(jk []byte, hot bool, children int64, salts int) {
		k := keyText(j.spec, jk)
		if hot {
			j.log.Info("hot key: salted", "partition", w.p, "key", k, "children", children, "salts", salts)
			j.sm.LayoutChanges.WithLabelValues("salted").Inc()
		} else {
			j.log.Info("hot key: cooled", "partition", w.p, "key", k, "children", children)
			j.sm.LayoutChanges.WithLabelValues("cooled").Inc()
		}
	}
	if fresh {
		if err := w.router.MarkFresh(t); err != nil {
			return err
		}
	}
	if err := w.router.Load(t); err != nil {
		return err
	}
	w.publishHot()
	return nil
}
