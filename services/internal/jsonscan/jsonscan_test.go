package jsonscan

import (
	"encoding/json"
	"testing"
)

// Each method takes a value exactly when encoding/json would read the same value from it, or refuses.
func TestScannerAgreesWithJSON(t *testing.T) {
	tests := []struct {
		in      string
		str     bool // Str takes it
		num     bool // Number takes it
		integer bool
	}{
		{in: `"alice"`, str: true},
		{in: ` "h\u00e9"`},                 // an escape: left to encoding/json
		{in: "\"caf\xc3\xa9\"", str: true}, // UTF-8
		{in: "\"caf\xe9\""},                // invalid UTF-8: encoding/json would replace it
		{in: "\"a\tb\""},                   // a control character: encoding/json refuses it
		{in: `"open`},
		{in: `0`, num: true, integer: true},
		{in: `-12`, num: true, integer: true},
		{in: `1.5`, num: true},
		{in: `-0.5e-3`, num: true},
		{in: `1E+2`, num: true},
		{in: `-`}, {in: `+1`}, {in: `.5`}, {in: `1.`}, {in: `1e`}, {in: `0x10`, num: true, integer: true}, // reads 0, leaves x10
		{in: `Inf`}, {in: `NaN`}, {in: `1_000`, num: true, integer: true}, // reads 1, leaves _000
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			s := Scanner{B: []byte(tc.in)}
			got, ok := s.Str()
			if ok != tc.str {
				t.Errorf("Str ok = %v, want %v", ok, tc.str)
			}
			if ok {
				var want string
				if err := json.Unmarshal([]byte(tc.in), &want); err != nil || want != string(got) {
					t.Errorf("Str = %q; json: %q, %v", got, want, err)
				}
			}
			s = Scanner{B: []byte(tc.in)}
			num, integer, ok := s.Number()
			if ok != tc.num || integer != tc.integer {
				t.Errorf("Number = %q, integer %v, ok %v; want integer %v, ok %v", num, integer, ok, tc.integer, tc.num)
			}
			if ok && !json.Valid(num) {
				t.Errorf("Number read %q, which is no JSON number", num)
			}
		})
	}
}

// Skip passes over exactly one JSON value, never over text that is not one.
func TestSkip(t *testing.T) {
	tests := []struct {
		in   string
		ok   bool
		rest string // what is left after the value
	}{
		{in: `{"a": [1, -2.5e3, "x", true, false, null, {}], "b": {"c": []}} tail`, ok: true, rest: " tail"},
		{in: `null,`, ok: true, rest: ","},
		{in: `"s"`, ok: true},
		{in: `[1, 2`}, {in: `{"a" 1}`}, {in: `nul`}, {in: `tru`}, {in: `{"a": "\u00e9"}`}, {in: ``}, {in: `]`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			s := Scanner{B: []byte(tc.in)}
			if ok := s.Skip(); ok != tc.ok {
				t.Fatalf("Skip ok = %v, want %v", ok, tc.ok)
			}
			if !tc.ok {
				return
			}
			if rest := tc.in[s.I:]; rest != tc.rest {
				t.Errorf("left %q, want %q", rest, tc.rest)
			}
			if !json.Valid([]byte(tc.in[:s.I])) {
				t.Errorf("skipped %q, which is no JSON value", tc.in[:s.I])
			}
		})
	}
}
