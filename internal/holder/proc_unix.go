//go:build unix && !linux

package holder

import (
	"errors"
	"os"
	"syscall"
)

// bootID is unknown here: holders of an earlier boot are found by PID only.
func bootID() string { return "" }

// startOf is unknown here: a reused PID passes for its holder.
func startOf(int) string { return "" }

// lookup reports whether a process with pid runs (signal 0 reaches it, or
// it exists but belongs to another user).
func lookup(pid int) (bool, string) {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false, ""
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EPERM), ""
}
