package usagecache

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpuhub/gpuhub/services/internal/contract"
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
		`{"asOf":"2026-11-23T10:00:00Z", "windows": {"24h": {"ü":{"x":-0.5e-3,"y":0,"z":-0}}, "7d": {"a": {"x": 1E+2}}}}`,
		`{"windows":{"24h":{"a":{"x":1,"x":2}}}}`, `{"windows":{},"windows":{"7d":{}}}`, `{"windows":{"24h":{"a":{}},"24h":{}}}`,
		`{"asOf":"2026-11-23T10:00:00Z","windows":{"7d":{"alice":{}},"24h":{"b":{}}}}`,
		`{"asOf":"yesterday"}`, `{"windows":{"24h":{"a":{"x":1e999}}}}`, `{} {}`, `{"a":1,}`, `[`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want contract.RollingResponse
		wantErr := json.Unmarshal(body, &want)
		got, err := decodeWire(body, nil)
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
		// decodeFast takes only what json.Unmarshal takes, and gives what it gives, with or without a previous
		// answer whose maps it may reuse (the same body's, and one that differs).
		for _, prev := range []map[string]map[string]map[string]float64{nil, want.Windows, {"24h": {"a": {"x": 1}, "b": nil}, "7d": {"b": {}, "alice": nil}}} {
			fast, ok := decodeFast(body, prev, nil)
			if !ok {
				continue
			}
			if wantErr != nil {
				t.Fatalf("json.Unmarshal: %v; decodeFast accepted it: %+v", wantErr, fast)
			}
			if diff := cmp.Diff(want, fast); diff != "" {
				t.Fatalf("decodeFast vs json.Unmarshal (-want +got):\n%s", diff)
			}
		}
	})
}

// decodeFast takes the usage API's own answers (json.Marshal's), and gives each user whose hours did not
// change since the previous answer that answer's map.
func TestDecodeFastReusesUnchangedUsers(t *testing.T) {
	first := map[string]map[string]map[string]float64{
		"24h": {"alice": {"gpu H100": 1.5, "shared T4": 0.25}, "bob": {}, "carol": {"gpu H100": 2}},
		"7d":  {"alice": {"gpu H100": 3}, "dave": {"mig A100 1g.5gb": 0.5}},
	}
	body, err := json.Marshal(contract.RollingResponse{AsOf: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), Windows: first})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := decodeFast(body, nil, nil)
	if !ok {
		t.Fatalf("decodeFast refused json.Marshal's answer: %s", body)
	}
	if diff := cmp.Diff(first, got.Windows); diff != "" {
		t.Fatalf("first answer (-want +got):\n%s", diff)
	}

	second := map[string]map[string]map[string]float64{
		"24h": {"alice": {"gpu H100": 1.5, "shared T4": 0.25}, "bob": {}, "carol": {"gpu H100": 2.5}},
		"7d":  {"alice": {"gpu H100": 3}, "dave": {"mig A100 1g.5gb": 0.5, "shared T4": 0}},
	}
	body, err = json.Marshal(contract.RollingResponse{AsOf: time.Date(2026, 11, 23, 10, 0, 15, 0, time.UTC), Windows: second})
	if err != nil {
		t.Fatal(err)
	}
	again, ok := decodeFast(body, got.Windows, nil)
	if !ok {
		t.Fatalf("decodeFast refused json.Marshal's answer: %s", body)
	}
	if diff := cmp.Diff(second, again.Windows); diff != "" {
		t.Fatalf("second answer (-want +got):\n%s", diff)
	}
	same := func(a, b map[string]float64) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	for _, c := range []struct {
		window, user string
		reused       bool
	}{
		{"24h", "alice", true}, {"24h", "bob", true}, {"24h", "carol", false}, {"7d", "alice", true}, {"7d", "dave", false},
	} {
		if r := same(got.Windows[c.window][c.user], again.Windows[c.window][c.user]); r != c.reused {
			t.Errorf("%s %s: map reused %v, want %v", c.window, c.user, r, c.reused)
		}
	}
}

// BenchmarkDecodeWire decodes B2's answer: 10,000 users in three windows, with each decoder.
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
			if _, err := decodeWire(body, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeFast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeFast(body, nil, nil); !ok {
				b.Fatal("decodeFast refused the answer")
			}
		}
	})
	// The steady state: the previous poll's answer, no user's hours changed.
	b.Run("decodeFast-unchanged", func(b *testing.B) {
		b.ReportAllocs()
		prev, ok := decodeFast(body, nil, nil)
		if !ok {
			b.Fatal("decodeFast refused the answer")
		}
		for b.Loop() {
			if _, ok := decodeFast(body, prev.Windows, nil); !ok {
				b.Fatal("decodeFast refused the answer")
			}
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		for b.Loop() {
			var w contract.RollingResponse
			if err := json.Unmarshal(body, &w); err != nil {
				b.Fatal(err)
			}
		}
	})
}
