//go:build !unix

package fetch

import (
	"errors"
	"os"
)

// lockFile does nothing where advisory file locks are not available: do
// not run two fetches with one output file there.
func lockFile(*os.File) error { return nil }

// fileIdentity is unknown where there is no lock: without one, nothing
// proves that no other run of the file is alive.
func fileIdentity(*os.File) (string, error) { return "", errors.New("no file locks here") }
