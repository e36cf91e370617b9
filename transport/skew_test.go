package transport

import (
	"net/http"
	"testing"
	"time"
)

// A cache's copy of an answer carries the origin's Date and its Age: that
// Date is minutes old, not the server's clock now, and taken for a sample
// it widened the bounds on the skew to minutes (a sample contradicting
// them), so every reset read after it waited as long. An answer with an
// Age gives no sample.
func TestCachedAnswerLeavesTheSkewAlone(t *testing.T) {
	var l lane
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fresh := http.Header{"Date": {now.Format(http.TimeFormat)}}
	l.read(http.StatusOK, fresh, nil, now.Add(-20*time.Millisecond), now.Add(10*time.Millisecond), "")
	before := l.skewNow()
	later := now.Add(time.Second)
	cached := http.Header{"Date": {now.Add(-10 * time.Minute).Format(http.TimeFormat)}, "Age": {"600"}}
	l.read(http.StatusOK, cached, nil, later.Add(-20*time.Millisecond), later, "")
	if got := l.skewNow(); got != before {
		t.Fatalf("skew %v after a cached answer, %v before", got, before)
	}
}
