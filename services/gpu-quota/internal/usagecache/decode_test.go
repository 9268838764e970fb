package usagecache

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// decodeWire answers as json.Unmarshal does: the same value when both accept the body, and an error when
// json.Unmarshal gives one.
func FuzzDecodeWire(f *testing.F) {
	for _, seed := range []string{
		`{"asOf":"2026-11-23T10:00:00Z","windows":{"24h":{"alice":{"gpu H100":1.5,"mig A100 3g.20gb":0.25},"bob":{}},"7d":{}}}`,
		`{"asOf":"2026-11-23T10:00:00Z","windows":{"24h":null,"7d":{"carol":null}},"extra":[1,{"a":2}]}`,
		`{"ASOF":"2026-11-23T10:00:00Z","Windows":{"24h":{"a":{"x":1}}},"windows":{"24h":{"b":{"y":2}},"7d":{}}}`,
		`{"windows":{"24h":{"a":{"x":1},"a":{"y":2}}}}`,
		`{"windows":null}`, `null`, `{}`, `{"windows":[]}`, `{"windows":{"24h":{"a":{"x":"1"}}}}`,
		`{"asOf":"yesterday"}`, `{"windows":{"24h":{"a":{"x":1e999}}}}`, `{} {}`, `{"a":1,}`, `[`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want wire
		wantErr := json.Unmarshal(body, &want)
		got, err := decodeWire(body)
		switch {
		case wantErr != nil && err == nil:
			t.Fatalf("json.Unmarshal: %v; decodeWire accepted it: %+v", wantErr, got)
		case wantErr == nil && err != nil:
			t.Fatalf("json.Unmarshal accepted it (%+v); decodeWire: %v", want, err)
		case wantErr == nil:
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("decodeWire vs json.Unmarshal (-want +got):\n%s", diff)
			}
		}
	})
}

// BenchmarkDecodeWire decodes B2's answer: 10,000 users in three windows.
func BenchmarkDecodeWire(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"asOf":"2026-11-23T10:00:00Z","windows":{`)
	for i, w := range []string{"24h", "7d", "30d"} {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, "%q:{", w)
		for u := range 10_000 {
			if u > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `"user%05d":{"gpu H100-80GB-HBM3":%g,"shared T4":%g}`, u, float64(u)/7, float64(u)/13)
		}
		sb.WriteByte('}')
	}
	sb.WriteString(`}}`)
	body := []byte(sb.String())
	b.Run("decodeWire", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeWire(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		for b.Loop() {
			var w wire
			if err := json.Unmarshal(body, &w); err != nil {
				b.Fatal(err)
			}
		}
	})
}
