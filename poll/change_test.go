package poll

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestCompare(t *testing.T) {
	first, d := Compare(Baseline{}, `"a"`, "", []byte(`[{"id":1},{"id":2}]`))
	if d.Changed || !first.Seen || !first.Array || len(first.Items) != 2 || first.ETag != `"a"` {
		t.Fatalf("first answer: %+v %+v", first, d)
	}
	same, d := Compare(first, `"b"`, "", []byte("[ {\"id\": 1},\n {\"id\":2} ]"))
	if d.Changed {
		t.Fatal("whitespace made a change")
	}
	_ = same
	same, d = Compare(first, `"a"`, "", []byte(`[{"id":1},{"id":2}]`))
	if d.Changed || same.Digest != first.Digest {
		t.Fatal("the same body is a change")
	}
	next, d := Compare(first, `"c"`, "", []byte(`[{"id":3},{"id":1},{"id":2,"edited":true}]`))
	if !d.Changed || !d.Items {
		t.Fatalf("%+v", d)
	}
	var got []string
	for _, it := range d.NewItems {
		got = append(got, string(it))
	}
	if strings.Join(got, " ") != `{"id":3} {"id":2,"edited":true}` {
		t.Fatalf("new items %v", got)
	}
	// Only removals: a change with no new items.
	_, d = Compare(next, `"d"`, "", []byte(`[{"id":3}]`))
	if !d.Changed || !d.Items || d.NewItems == nil || len(d.NewItems) != 0 {
		t.Fatalf("%+v", d)
	}
	// An object body: the whole body, no items.
	obj, _ := Compare(Baseline{}, "", "", []byte(`{"v":1}`))
	_, d = Compare(obj, "", "", []byte(`{"v":2}`))
	if !d.Changed || d.Items || d.NewItems != nil {
		t.Fatalf("%+v", d)
	}
	// From an object to an array: the whole body.
	_, d = Compare(obj, "", "", []byte(`[1]`))
	if !d.Changed || d.Items {
		t.Fatalf("%+v", d)
	}
}

func TestChangeJSON(t *testing.T) {
	at := time.Date(2025, 6, 10, 1, 2, 3, 0, time.UTC)
	cases := []struct {
		c    Change
		want string
	}{
		{Change{URL: "https://x/e", ETag: `"e1"`, ChangedAt: at, Body: []byte("{\n \"a\": 1\n}")},
			`{"url":"https://x/e","etag":"\"e1\"","changed_at":"2025-06-10T01:02:03Z","body":{"a":1}}`},
		{Change{URL: "https://x/e", ChangedAt: at, Body: []byte(`[1,2]`), Items: true, NewItems: []json.RawMessage{json.RawMessage(`2`)}},
			`{"url":"https://x/e","changed_at":"2025-06-10T01:02:03Z","new_items":[2]}`},
		{Change{URL: "https://x/e", ChangedAt: at, Body: []byte(`[1]`), Items: true, NewItems: []json.RawMessage{}},
			`{"url":"https://x/e","changed_at":"2025-06-10T01:02:03Z","new_items":[]}`},
		{Change{URL: "https://x/r", ChangedAt: at, Body: []byte("plain text\n")},
			`{"url":"https://x/r","changed_at":"2025-06-10T01:02:03Z","body":"plain text\n"}`},
		{Change{URL: "https://x/b", ChangedAt: at, Body: []byte{0xff, 0x00}},
			`{"url":"https://x/b","changed_at":"2025-06-10T01:02:03Z","body_base64":"/wA="}`},
		{Change{URL: "https://x/i", ChangedAt: at, Initial: true, Body: []byte(`{}`)},
			`{"url":"https://x/i","changed_at":"2025-06-10T01:02:03Z","initial":true,"body":{}}`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.c)
		if err != nil || string(b) != c.want {
			t.Errorf("got  %s (%v)\nwant %s", b, err, c.want)
		}
		if !json.Valid(b) {
			t.Errorf("invalid JSON %s", b)
		}
	}
}

func TestRedact(t *testing.T) {
	cases := map[string]string{
		"https://gitlab.example/api/v4/projects/1/merge_requests?private_token=glpat-secret&state=opened": "https://gitlab.example/api/v4/projects/1/merge_requests?private_token=REDACTED&state=opened",
		"https://user:pass@example.com/x":         "https://user:REDACTED@example.com/x",
		"https://ghp_token1234@example.com/x":     "https://REDACTED@example.com/x", // a token as the user name
		"https://api.github.com/repos/o/r/events": "https://api.github.com/repos/o/r/events",
		"https://h/x?api_key=k1&page=2":           "https://h/x?api_key=REDACTED&page=2",
	}
	for in, want := range cases {
		u := mustParse(t, in)
		if got := Redact(u); got != want {
			t.Errorf("Redact(%s) = %s, want %s", in, got, want)
		}
	}
}
