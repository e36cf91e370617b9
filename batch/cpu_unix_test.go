//go:build unix

package batch_test

import (
	"syscall"
	"time"
)

// cpuNow is the CPU time this process has spent, user and system.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
