//go:build !linux

package debezium

import "time"

// processCPU is unavailable here; benchmarks then omit the CPU-time metric.
func processCPU() time.Duration { return 0 }
