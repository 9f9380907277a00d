package kafkarun

// PaceByTime makes o's workers step their work in progress by time even
// with a sink.Positioned, as upsert mode does (the negative control of
// stepping by input: a batch re-created after a crash then cuts other
// chunks).
func PaceByTime(o *Options) { o.paceByTime = true }
