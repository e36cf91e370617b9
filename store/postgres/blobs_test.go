package postgres_test

import (
	"testing"

	"github.com/ratekeeper/ratekeeper/store/storetest"
)

func BenchmarkBlobs(b *testing.B) {
	storetest.BenchmarkBlobs(b, backend(b).NewDSN)
}
