package provider

import (
	"net/http"
	"slices"
	"testing"
)

func TestLanguageModelProviders(t *testing.T) {
	r := Defaults()
	oa, an := r.Lookup("openai"), r.Lookup("anthropic")
	if oa == nil || an == nil {
		t.Fatal("openai and anthropic are not built in")
	}
	if oa.BaseURL().String() != OpenAIAPI || !slices.Equal(oa.TokenEnv, []string{"OPENAI_API_KEY"}) || oa.Auth != (Auth{Header: "Authorization", Prefix: "Bearer"}) {
		t.Errorf("openai: %s %v %+v", oa.BaseURL(), oa.TokenEnv, oa.Auth)
	}
	if an.BaseURL().String() != AnthropicAPI || !slices.Equal(an.TokenEnv, []string{"ANTHROPIC_API_KEY"}) || an.Auth != (Auth{Header: "X-Api-Key"}) {
		t.Errorf("anthropic: %s %v %+v", an.BaseURL(), an.TokenEnv, an.Auth)
	}
	h := http.Header{}
	an.Authorize(h, "sk-ant-x")
	an.SetDefaultHeaders(h)
	if h.Get("X-Api-Key") != "sk-ant-x" || h.Get("Anthropic-Version") != AnthropicVersion {
		t.Errorf("anthropic request headers %v", h)
	}
	mine := http.Header{"Anthropic-Version": {"2099-01-01"}}
	an.SetDefaultHeaders(mine)
	if got := mine.Values("Anthropic-Version"); !slices.Equal(got, []string{"2099-01-01"}) {
		t.Errorf("the caller's anthropic-version became %v", got)
	}
	oa.SetDefaultHeaders(h)
	if len(h) != 2 {
		t.Errorf("openai added headers: %v", h)
	}
	o, ok := oa.OwnerFromHeader(http.Header{"Openai-Organization": {"org-acme"}})
	if !ok || o.Key() != "user:org:org-acme" || !oa.OwnerInHeader() {
		t.Errorf("openai owner %+v %v", o, ok)
	}
	if _, ok := oa.OwnerFromHeader(http.Header{}); ok {
		t.Error("an answer naming no organization named one")
	}
	if o, ok := an.OwnerFromHeader(http.Header{"Anthropic-Organization-Id": {"5f1c"}}); !ok || o.Key() != "user:org:5f1c" {
		t.Errorf("anthropic owner %+v %v", o, ok)
	}
	if r.Lookup("github").OwnerInHeader() {
		t.Error("github names its owner in a header")
	}
	if u, ok := oa.ValidationURL(); !ok || u.String() != OpenAIAPI+"/models" {
		t.Errorf("openai who-am-I %v", u)
	}
	req, err := an.ValidationRequest(t.Context())
	if err != nil || req.Header.Get("Anthropic-Version") == "" {
		t.Errorf("anthropic who-am-I request %v %v", req, err)
	}
}
