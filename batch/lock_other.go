//go:build !unix

package batch

import "os"

// lockFile does nothing where advisory file locks are not available: do
// not run two fetches with one output file there.
func lockFile(*os.File) error { return nil }
