package timegen

import (
	"fmt"
	"strconv"
	"time"

	"github.com/cdcjoin/cdcjoin/deadletter"
	"github.com/cdcjoin/cdcjoin/timejoin"
)

// LateByLetters maps dead letters (each given by its headers) to the
// events of an encoded history they name (by source topic, partition and
// offset) and returns, per event, whether some letter names it. It fails
// on a letter that names no record of recs, whose reason is not late, or
// whose record time or watermark headers do not show the record late
// under s (time < watermark - allowed_lateness, the time the event's). A
// letter may come more than once (a batch redone after a crash writes its
// letters again).
func LateByLetters(s *timejoin.Spec, recs []Record, events []Event, letters []map[string]string) ([]bool, error) {
	type pos struct {
		topic     string
		partition int32
		offset    int64
	}
	ev := make(map[pos]int, len(recs))
	for _, r := range recs {
		ev[pos{r.Topic, r.Partition, r.Offset}] = r.Event
	}
	late := make([]bool, len(events))
	for _, h := range letters {
		p, err1 := strconv.Atoi(h[deadletter.HeaderSourcePartition])
		o, err2 := strconv.ParseInt(h[deadletter.HeaderSourceOffset], 10, 64)
		i, ok := ev[pos{h[deadletter.HeaderSourceTopic], int32(p), o}]
		if err1 != nil || err2 != nil || !ok || i < 0 || h[deadletter.HeaderReason] != deadletter.ReasonLate {
			return nil, fmt.Errorf("a dead letter that is not a late record of the history: %v", h)
		}
		tm, err1 := time.Parse(time.RFC3339Nano, h[deadletter.HeaderTime])
		wm, err2 := time.Parse(time.RFC3339Nano, h[deadletter.HeaderWatermark])
		if err1 != nil || err2 != nil || tm.UnixMicro() != events[i].Time || !(tm.UnixMicro() < wm.UnixMicro()-s.AllowedLateness) {
			return nil, fmt.Errorf("dead letter of event %d (%v): time %s, watermark %s (lateness %dµs): not late (%v, %v)",
				i, events[i], h[deadletter.HeaderTime], h[deadletter.HeaderWatermark], s.AllowedLateness, err1, err2)
		}
		late[i] = true
	}
	return late, nil
}
