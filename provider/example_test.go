package provider_test

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/ratekeeper/ratekeeper/provider"
)

func Example() {
	reg := provider.Defaults()
	// Two simulated APIs on one host, told apart by their base paths.
	for _, flag := range []string{"github=http://127.0.0.1:8080/gh", "gitlab=http://127.0.0.1:8080/gl/api/v4"} {
		if err := reg.ApplyFlag(flag); err != nil {
			panic(err)
		}
	}
	u, _ := url.Parse("http://127.0.0.1:8080/gh/search/code?q=ratekeeper")
	p := reg.Match(u)
	h := http.Header{}
	p.Authorize(h, "tok-alice-1")
	fmt.Println(p.Name, p.Resource("GET", u), h.Get("Authorization"))

	redirect, _ := url.Parse("https://objects.example.net/blob")
	fmt.Println("token on redirect:", p.Owns(redirect))

	_, err := provider.ParseProviderFlag("gh=ftp://x")
	fmt.Println(err)
	// Output:
	// github code_search Bearer tok-alice-1
	// token on redirect: false
	// --provider gh=ftp://x: base URL must be http or https, not "ftp"
}
