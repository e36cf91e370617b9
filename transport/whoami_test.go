package transport

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ratekeeper/ratekeeper/sim"
)

// TestWhoAmICountsInTheOwnersBucket: a "who am I" request is reserved and
// settled while its token's owner is unknown — in a process that knows no
// bucket yet, against nothing but the token's own — yet it spends the
// owner's bucket. Once the answer names the owner, its reading is applied
// there too; otherwise the owner's bucket, which another process had
// already drawn down, would count one request too few, and one request
// would go into a spent bucket.
func TestWhoAmICountsInTheOwnersBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := sim.APIConfig{Dialect: "github", Limit: 3, Window: time.Hour,
			Tokens: []sim.TokenConfig{{Token: "tok-alice-1", Owner: "alice"}, {Token: "tok-alice-2", Owner: "alice"}}}
		shared := NewMemoryState()
		tune := func(o *Options) {
			o.State = shared
			o.AskOwnerFirst = true
			o.MaxWait = time.Minute
		}
		first := newSim(t, api, []string{"tok-alice-2"}, tune)
		second := first.sibling(t, []string{"tok-alice-1"}, tune)
		get := func(s *simSetup, i int) error {
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/repos/o/r%d", s.base, i), nil)
			resp, err := s.t.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		// The first process: "who am I" and a GET, 2 of alice's 3.
		if err := get(first, 1); err != nil {
			t.Fatal(err)
		}
		// The second: "who am I" (alice's 3rd), then a GET that must
		// wait for her reset.
		var we *WaitError
		if err := get(second, 2); !errors.As(err, &we) {
			t.Fatalf("second process's GET: %v, want a WaitError", err)
		}
		if st := first.srv.Stats().Total; st.PrimaryViolations != 0 || st.Requests != 3 {
			t.Fatalf("the server saw %d requests, %d for a spent bucket; want 3 and none", st.Requests, st.PrimaryViolations)
		}
	})
}
