package timejointest_test

import (
	"fmt"
	"time"

	"github.com/cdcjoin/cdcjoin/timejoin/timejointest"
)

// adClicks is the interval join of the issue: impressions ⋈ clicks of the
// same ad and user within 30 minutes after the impression.
func adClicks(join string, ooo, lateness time.Duration) *timejointest.Driver {
	d, err := timejointest.New(timejointest.Config{
		Kind: "interval", Join: join, Lower: 0, Upper: 30 * time.Minute,
		OutOfOrderness: ooo, AllowedLateness: lateness,
		Left:   timejointest.Input{Name: "ads.impressions", Key: []string{"ad_id"}, Time: "impression_time"},
		Right:  timejointest.Input{Name: "ads.clicks", Key: []string{"ad_id"}, Time: "click_time"},
		Select: []string{"left.impression_id", "right.click_id"},
	})
	if err != nil {
		panic(err)
	}
	return d
}

var t0 = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

// A click exactly at the bound (impression time + 30 minutes) joins: the
// bounds are inclusive, to the microsecond.
func Example_matchAtBound() {
	d := adClicks("inner", 0, 0)
	d.Pipe("ads.impressions", 0, map[string]any{"impression_id": 1, "ad_id": 7, "impression_time": t0})
	d.Pipe("ads.clicks", 0, map[string]any{"click_id": 100, "ad_id": 7, "click_time": t0.Add(30 * time.Minute)})
	fmt.Println(d.ReadRows())
	// Output: [{impression_id: 1, click_id: 100}]
}

// A click one microsecond past the bound does not join; in a LEFT join
// the impression is emitted NULL-padded once the watermark passes its
// bound (impression time + 30 minutes).
func Example_oneMicrosecondPast() {
	d := adClicks("left", 0, 0)
	d.Pipe("ads.impressions", 0, map[string]any{"impression_id": 1, "ad_id": 7, "impression_time": t0})
	d.Pipe("ads.clicks", 0, map[string]any{"click_id": 100, "ad_id": 7, "click_time": t0.Add(30*time.Minute + time.Microsecond)})
	fmt.Println(d.ReadRows(), d.Watermark().Format(time.TimeOnly))
	// The watermark is the minimum of both inputs' partitions: the
	// impressions' must pass 10:30 too.
	d.Pipe("ads.impressions", 0, map[string]any{"impression_id": 2, "ad_id": 8, "impression_time": t0.Add(31 * time.Minute)})
	fmt.Println(d.ReadRows())
	// Output:
	// [] 10:00:00
	// [{impression_id: 1, click_id: NULL}]
}

// Records may arrive out of order by up to out_of_orderness: a click
// seen before its impression still joins.
func Example_outOfOrder() {
	d := adClicks("inner", 10*time.Second, 0)
	d.Pipe("ads.clicks", 0, map[string]any{"click_id": 100, "ad_id": 7, "click_time": t0.Add(5 * time.Second)})
	d.Pipe("ads.impressions", 0, map[string]any{"impression_id": 1, "ad_id": 7, "impression_time": t0.Add(5 * time.Second)})
	d.Pipe("ads.impressions", 0, map[string]any{"impression_id": 2, "ad_id": 7, "impression_time": t0}) // 5 s behind its partition
	fmt.Println(d.ReadRows(), d.Late())
	// Output: [{impression_id: 1, click_id: 100} {impression_id: 2, click_id: 100}] []
}

// A record behind the watermark by more than allowed_lateness (the grace)
// is late: it takes no part in the join and is reported (as a bad record
// with reason "late" in replay and run). Within the grace it still joins.
func Example_afterTheGrace() {
	d := adClicks("inner", 0, 5*time.Minute)
	d.Pipe("ads.impressions", 0, map[string]any{"impression_id": 1, "ad_id": 7, "impression_time": t0.Add(time.Hour)})
	d.Pipe("ads.clicks", 0, map[string]any{"click_id": 100, "ad_id": 7, "click_time": t0.Add(time.Hour)})
	// The watermark is 11:00; 10:56 is within the 5-minute grace, 10:54 is not.
	d.Pipe("ads.impressions", 0, map[string]any{"impression_id": 2, "ad_id": 7, "impression_time": t0.Add(56 * time.Minute)})
	d.Pipe("ads.impressions", 0, map[string]any{"impression_id": 3, "ad_id": 7, "impression_time": t0.Add(54 * time.Minute)})
	fmt.Println(d.ReadRows())
	fmt.Println(d.Late())
	// Output:
	// [{impression_id: 1, click_id: 100} {impression_id: 2, click_id: 100}]
	// [late ads.impressions/0 at 2024-05-01T10:54:00Z (watermark 2024-05-01T11:00:00Z)]
}

// A partition without records holds the watermark back; once it is idle
// (idle_timeout of event time in the other partitions, or Idle) the
// watermark moves on without it.
func Example_idlePartition() {
	d := adClicks("left", 0, 0)
	d.Declare("ads.impressions", 1) // a second partition that stays silent
	d.Pipe("ads.impressions", 0, map[string]any{"impression_id": 1, "ad_id": 7, "impression_time": t0})
	d.Pipe("ads.clicks", 0, map[string]any{"click_id": 100, "ad_id": 9, "click_time": t0.Add(time.Hour)})
	d.Pipe("ads.impressions", 0, map[string]any{"impression_id": 2, "ad_id": 8, "impression_time": t0.Add(time.Hour)})
	fmt.Println(d.ReadRows(), d.Watermark().IsZero())
	d.Idle("ads.impressions", 1)
	fmt.Println(d.ReadRows(), d.Watermark().Format(time.TimeOnly))
	// Output:
	// [] true
	// [{impression_id: 1, click_id: NULL}] 11:00:00
}

// A tumbling window join emits a window's pairs when it closes (the
// watermark reaches its end); window.start and window.end are columns.
func Example_window() {
	d, err := timejointest.New(timejointest.Config{
		Kind: "window", Join: "full", Size: time.Hour,
		Left:   timejointest.Input{Name: "orders", Key: []string{"user_id"}, Time: "ordered_at"},
		Right:  timejointest.Input{Name: "payments", Key: []string{"user_id"}, Time: "paid_at"},
		Select: []string{"window.start", "left.order_id", "right.payment_id"},
	})
	if err != nil {
		panic(err)
	}
	d.Pipe("orders", 0, map[string]any{"order_id": 1, "user_id": 5, "ordered_at": t0.Add(10 * time.Minute)})
	d.Pipe("payments", 0, map[string]any{"payment_id": 9, "user_id": 5, "paid_at": t0.Add(50 * time.Minute)})
	d.Pipe("payments", 0, map[string]any{"payment_id": 10, "user_id": 6, "paid_at": t0.Add(70 * time.Minute)})
	fmt.Println(d.ReadRows())
	d.EndOfInput()
	fmt.Println(d.ReadRows())
	// Output:
	// []
	// [{window_start: 2024-05-01T10:00:00Z, order_id: 1, payment_id: 9} {window_start: 2024-05-01T11:00:00Z, order_id: NULL, payment_id: 10}]
}

// An event-time temporal join gives each order the user's row as it was at
// the order's time, once the watermark passes it.
func Example_temporal() {
	d, err := timejointest.New(timejointest.Config{
		Kind: "temporal", Join: "left",
		Left:   timejointest.Input{Name: "orders", Key: []string{"user_id"}, Time: "ordered_at"},
		Right:  timejointest.Input{Name: "users", Key: []string{"id"}, Time: "ts"},
		Select: []string{"left.order_id", "right.name"},
	})
	if err != nil {
		panic(err)
	}
	d.Pipe("users", 0, map[string]any{"id": 5, "name": "Egor", "ts": t0})
	d.Pipe("orders", 0, map[string]any{"order_id": 1, "user_id": 5, "ordered_at": t0.Add(time.Minute)})
	d.Pipe("users", 0, map[string]any{"id": 5, "name": "Egor2", "ts": t0.Add(2 * time.Minute)})
	d.Pipe("orders", 0, map[string]any{"order_id": 2, "user_id": 5, "ordered_at": t0.Add(3 * time.Minute)})
	d.Delete("users", 0, map[string]any{"id": 5, "ts": t0.Add(4 * time.Minute)})
	d.Pipe("orders", 0, map[string]any{"order_id": 3, "user_id": 5, "ordered_at": t0.Add(5 * time.Minute)})
	d.EndOfInput()
	for _, r := range d.ReadRows() {
		fmt.Println(r)
	}
	// Output:
	// {order_id: 1, name: "Egor"}
	// {order_id: 2, name: "Egor2"}
	// {order_id: 3, name: NULL}
}
