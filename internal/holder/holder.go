// Package holder names the process that holds something shared — a quota
// lease, a running task — and tells whether a holder on this machine is
// gone.
//
// A holder is written as "host/boot/pid/start": the machine's name, its
// boot (a reboot ends every process), the process ID and the process's
// start time (a PID is reused; a PID with another start time is another
// process). Only a holder on this machine can be proven gone, by looking
// at the process table; a holder on another machine is gone when it stops
// renewing its heartbeat, which is for the store that keeps heartbeats to
// judge.
//
// Layer 0 of docs/architecture.md: it reads the process table and nothing
// else.
package holder

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// ID names one process on one machine.
type ID struct {
	Host  string // os.Hostname
	Boot  string // the machine's boot, when the system tells it
	PID   int
	Start string // the process's start, when the system tells it
}

// String is the form stores keep: "host/boot/pid/start".
func (id ID) String() string {
	return fmt.Sprintf("%s/%s/%d/%s", id.Host, id.Boot, id.PID, id.Start)
}

// Parse reads a holder written by String. It reports false for anything
// else (a holder of an older version, a name given by hand), which is never
// taken for gone.
func Parse(s string) (ID, bool) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 || parts[0] == "" {
		return ID{}, false
	}
	pid, err := strconv.Atoi(parts[2])
	if err != nil || pid <= 0 {
		return ID{}, false
	}
	return ID{Host: parts[0], Boot: parts[1], PID: pid, Start: parts[3]}, true
}

var (
	selfOnce sync.Once
	self     ID
)

// Self is this process.
func Self() ID {
	selfOnce.Do(func() {
		host, _ := os.Hostname()
		pid := os.Getpid()
		self = ID{Host: host, Boot: bootID(), PID: pid, Start: startOf(pid)}
	})
	return self
}

// Local reports whether s names a process on this machine (this boot).
func Local(s string) bool {
	id, ok := Parse(s)
	me := Self()
	return ok && id.Host == me.Host && id.Boot == me.Boot
}

// Gone reports whether holder s is proven gone: it names a process of this
// machine that no longer runs (no process with its PID, or one that started
// at another time), or of this machine's earlier boot. A holder of another
// machine, or one that cannot be read, is not proven gone: taking the lease
// or task of a live holder would spend its quota or run its work twice, so
// Gone never guesses.
func Gone(s string) bool {
	id, ok := Parse(s)
	if !ok {
		return false
	}
	me := Self()
	if id.Host != me.Host {
		return false
	}
	if id.Boot != me.Boot {
		// Same machine, another boot: every process of that boot ended.
		return id.Boot != "" && me.Boot != ""
	}
	if id.PID == me.PID {
		return id.Start != me.Start && id.Start != "" && me.Start != ""
	}
	running, start := lookup(id.PID)
	if !running {
		return true
	}
	return id.Start != "" && start != "" && start != id.Start
}
