package api

import (
	"net/url"
	"strings"
)

// queryParams is a request's query read as r.URL.Query() reads it (a key's first value; the pairs
// url.ParseQuery drops, with a semicolon or a bad escape, skipped), without the map it builds: every panel poll
// has a query (since, tz), and that map was most of what a poll allocated. Each lookup scans the query, which
// is short for the few parameters an answer reads.
type queryParams string

// maxQueryParams is url.ParseQuery's default limit: past it, it reads no parameter at all.
const maxQueryParams = 10000

func newQueryParams(raw string) queryParams {
	if strings.Count(raw, "&")+1 > maxQueryParams {
		return ""
	}
	return queryParams(raw)
}

// Get is the first value of key, "" if none.
func (q queryParams) Get(key string) string {
	v, _ := q.lookup(key)
	return v
}

// Has says whether key is in the query (possibly with an empty value).
func (q queryParams) Has(key string) bool {
	_, ok := q.lookup(key)
	return ok
}

func (q queryParams) lookup(key string) (string, bool) {
	for s := string(q); s != ""; {
		var pair string
		pair, s, _ = strings.Cut(s, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if k, err := url.QueryUnescape(k); err != nil || k != key {
			continue // unescaped, a key allocates nothing
		}
		v, err := url.QueryUnescape(v)
		if err != nil {
			continue
		}
		return v, true
	}
	return "", false
}
