package api

import (
	"net/url"
	"strings"
	"testing"
)

// checkQueryParams: queryParams reads what r.URL.Query() reads, for the parameters the answers read and key.
func checkQueryParams(t *testing.T, raw, key string) {
	t.Helper()
	want, _ := url.ParseQuery(raw)
	got := newQueryParams(raw)
	for _, k := range []string{key, "tz", "since", "history", "from", "to"} {
		if g, w := got.Get(k), want.Get(k); g != w {
			t.Errorf("?%.100q: Get(%q) = %q, url.Values says %q", raw, k, g, w)
		}
		if g, w := got.Has(k), want.Has(k); g != w {
			t.Errorf("?%.100q: Has(%q) = %t, url.Values says %t", raw, k, g, w)
		}
	}
}

func TestQueryParams(t *testing.T) {
	for name, raw := range map[string]string{
		"none":                 "",
		"a panel's poll":       "since=2026-11-22T10%3A29%3A55.123Z&tz=Europe%2FBerlin",
		"plus is a space":      "tz=America+New_York&since=2026-11-22T10:00:00+01:00",
		"first value":          "tz=UTC&tz=Europe/Berlin",
		"key without value":    "from&to=",
		"escaped key":          "t%7A=Asia/Kolkata&%68istory=false",
		"bad escape skipped":   "tz=%zz&tz=UTC&since%g=1",
		"semicolon skipped":    "tz=UTC;x&tz=Europe/Berlin&from=a;b",
		"empty pairs":          "&&=&tz=&&history=true&",
		"too many parameters":  "tz=UTC" + strings.Repeat("&x", maxQueryParams),
		"at most parameters":   "tz=UTC" + strings.Repeat("&x", maxQueryParams-1),
		"equals in value":      "since==2026&to=a=b",
		"bad escape in key":    "%=1&from=x",
		"value with semicolon": "history=true%3Bfalse",
	} {
		t.Run(name, func(t *testing.T) { checkQueryParams(t, raw, "x") })
	}
}

func FuzzQueryParams(f *testing.F) {
	f.Add("since=2026-11-22T10%3A29%3A55.123Z&tz=Europe%2FBerlin", "tz")
	f.Add("t%7A=UTC;&tz=%zz&tz&tz=a+b", "tz")
	f.Add("&&=&%41=1&a=2", "A")
	f.Fuzz(checkQueryParams)
}
