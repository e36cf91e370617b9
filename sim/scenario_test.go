package sim

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// The testdata files are the scenario's configs, so the command and the
// Go helper serve the same thing.
func TestUsersThrottleFiles(t *testing.T) {
	for file, u := range map[string]UsersThrottle{
		"testdata/users-throttle.toml":         {},
		"testdata/users-throttle-bare.toml":    {Refusal: RefusalBare},
		"testdata/users-throttle-generic.toml": {Generic: true, Refusal: RefusalBare},
	} {
		got, err := LoadConfig(file)
		if err != nil {
			t.Fatal(err)
		}
		if want := u.Config(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", file, got.APIs[0], want.APIs[0])
		}
	}
}

func TestUsersThrottleScenario(t *testing.T) {
	for _, u := range []UsersThrottle{{}, {Refusal: RefusalBare}, {Generic: true, Refusal: RefusalBare}} {
		t.Run(u.Refusal+map[bool]string{true: "/generic"}[u.Generic], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := mustNew(t, u.Config())
				c := newClient(t, srv)
				urls, isUser := u.Workload("", 120, 400, 1)
				users, refused, rateHeaders := 0, 0, 0
				for i, p := range urls {
					a := c.get(p, "tok-bench-1")
					for k := range a.header {
						if strings.HasPrefix(strings.ToLower(k), "ratelimit") || strings.HasPrefix(strings.ToLower(k), "x-ratelimit") || k == "Retry-After" {
							rateHeaders++
							break
						}
					}
					switch {
					case !isUser[i] && a.status != http.StatusOK:
						t.Fatalf("%s: %d %s", p, a.status, a.body)
					case isUser[i] && a.status == http.StatusOK:
						users++
					case isUser[i] && a.status == http.StatusTooManyRequests:
						refused++
					case isUser[i]:
						t.Fatalf("%s: %d %s", p, a.status, a.body)
					}
				}
				// All at one instant: the first 40 users pass, 80 are refused.
				if users != 40 || refused != 80 {
					t.Errorf("%d users served, %d refused; want 40 and 80", users, refused)
				}
				if u.Generic && rateHeaders != 0 {
					t.Errorf("%d answers of the generic host carry a rate-limit header, want none", rateHeaders)
				}
				want := len(urls)
				if u.Refusal == RefusalBare {
					want -= refused // a bare 429 says nothing
				}
				if !u.Generic && rateHeaders != want {
					t.Errorf("%d of %d answers carry rate-limit headers, want %d", rateHeaders, len(urls), want)
				}
				e, _ := srv.Stats().EndpointLimitFor(srv.APIs()[0].Name, UsersThrottleOwner, UsersThrottleName)
				// All arrived at the instant of the first refusal: in
				// flight with it, none early.
				if e.Refused != 80 || e.EarlyRetries != 0 {
					t.Errorf("%+v", e)
				}
				time.Sleep(time.Minute)
				if a := c.get(urls[0], "tok-bench-1"); a.status != http.StatusOK {
					t.Errorf("next window: %d", a.status)
				}
			})
		})
	}
}
