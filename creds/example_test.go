package creds_test

import (
	"fmt"
	"time"

	"github.com/ratekeeper/ratekeeper/creds"
	"github.com/ratekeeper/ratekeeper/provider"
)

func ExampleLoad() {
	gh := provider.Defaults().Lookup("github")
	env := map[string]string{"GITHUB_TOKEN": "tok-bot-one-1111,tok-bot-two-2222"}
	pool, _, err := creds.Load(gh, creds.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	first := pool.Credentials()[0]
	first.MarkInvalid("GET /user answered 401", now, time.Time{})
	fmt.Println(pool.Credentials())
	fmt.Println("eligible:", pool.Eligible(now))

	_, _, err = creds.Load(gh, creds.Options{LookupEnv: func(string) (string, bool) { return "tok-a,,tok-b", true }})
	fmt.Println(err)
	// Output:
	// [#1 …1111 #2 …2222]
	// eligible: [#2 …2222]
	// GITHUB_TOKEN: entry #2 is empty; expected tokens separated by single commas, such as tok1,tok2
}
