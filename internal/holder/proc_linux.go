//go:build linux

package holder

import (
	"os"
	"strconv"
	"strings"
)

// bootID is the kernel's random ID of this boot.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// startOf is process pid's start time in clock ticks since boot (field 22
// of /proc/pid/stat), "" when it cannot be read.
func startOf(pid int) string {
	_, start := stat(pid)
	return start
}

// stat reads process pid's state (field 3 of /proc/pid/stat: R, S, Z…)
// and start (field 22), "" for what cannot be read.
func stat(pid int) (state, start string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", ""
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields after its closing one.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", ""
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return "", ""
	}
	return fields[0], fields[19]
}

// lookup reports whether a process with pid runs, and its start. A zombie
// (a process that has ended, not yet waited for by its parent: a killed
// process whose supervisor has not reaped it, for a while or for good)
// does not run: it holds nothing anymore.
func lookup(pid int) (bool, string) {
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		return !os.IsNotExist(err), ""
	}
	state, start := stat(pid)
	if state == "Z" || state == "X" {
		return false, start
	}
	return true, start
}
