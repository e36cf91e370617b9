//go:build unix

package fetch

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on f without waiting, so that
// two processes never append to one output file. The lock ends when f is
// closed or the process dies, kill -9 included.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}

// fileIdentity names the file f is, on this machine: its device and inode
// with the host's name. A path would not do: a file deleted and created
// again under the same name is another file, whose lock says nothing of a
// process still writing the first.
func fileIdentity(f *os.File) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", errors.New("no device and inode")
	}
	host, err := os.Hostname()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s\x00%d\x00%d", host, uint64(st.Dev), uint64(st.Ino)), nil //nolint:unconvert // Dev and Ino differ in type across systems
}
