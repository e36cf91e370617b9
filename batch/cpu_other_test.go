//go:build !unix

package batch_test

import "time"

// cpuNow is not measured here: cpu-ns/op reads 0.
func cpuNow() time.Duration { return 0 }
