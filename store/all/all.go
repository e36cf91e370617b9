// Package all links every store into a program, so that store.Open
// opens any connection string:
//
//	import _ "github.com/ratekeeper/ratekeeper/store/all"
//
// A program that opens only one kind of database imports that store's
// package instead (store/memory, store/sqlite, store/postgres), as
// database/sql's drivers are imported.
//
// Layer 3 of docs/architecture.md: it owns that list and nothing else.
package all

import (
	_ "github.com/ratekeeper/ratekeeper/store/memory"   // "" and "memory"
	_ "github.com/ratekeeper/ratekeeper/store/postgres" // postgres:// and postgresql://
	_ "github.com/ratekeeper/ratekeeper/store/sqlite"   // a file path
)
