package jsonappend

import (
	"encoding/json"
	"math"
	"testing"
)

func TestString(t *testing.T) {
	for _, s := range []string{"", "alice", `<>&"\`, "a\u2028b\u2029c", "\x00\x01\x1f\x7f", "tab\tnl\ncr\rbs\bff\f",
		"\xff\xfe invalid", "emoji 🙂", "ü and 中文", "\xe2\x80", "end\\"} {
		want, _ := json.Marshal(s)
		if got := String(nil, s); string(got) != string(want) {
			t.Errorf("String(%q) = %s, want %s", s, got, want)
		}
	}
}

func TestFloat(t *testing.T) {
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 1e-7, 1e-6, 9.99e-7, 1e20, 1e21, -1e21, 123456.789, 3.0 / 7,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 1e-300, 12e-100} {
		want, _ := json.Marshal(f)
		got, ok := Float(nil, f)
		if !ok || string(got) != string(want) {
			t.Errorf("Float(%v) = %s %v, want %s", f, got, ok, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if got, ok := Float([]byte("x"), f); ok || string(got) != "x" {
			t.Errorf("Float(%v) = %q %v, want b unchanged and false", f, got, ok)
		}
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"", "a<b", "\u2028", "\xff", "\"\\\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := String(nil, s); string(got) != string(want) {
			t.Errorf("String(%q) = %s, want %s", s, got, want)
		}
	})
}

func FuzzFloat(f *testing.F) {
	for _, v := range []float64{0, 1e-7, 1e21, 0.1} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		want, err := json.Marshal(v)
		got, ok := Float(nil, v)
		if ok != (err == nil) || ok && string(got) != string(want) {
			t.Errorf("Float(%v) = %s %v, want %s (err %v)", v, got, ok, want, err)
		}
	})
}
