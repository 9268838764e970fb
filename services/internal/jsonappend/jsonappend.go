// Package jsonappend appends JSON values to a byte slice exactly as encoding/json writes them, for the few answers
// written by hand because they are sent thousands of times a second (gpu-quota's admission answer, usage-api's
// me): encoding/json's reflection and boxed values were most of their CPU or garbage. Each function's output is
// compared with json.Marshal's by the tests, fuzzed.
package jsonappend

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// Hex is the digits of \u escapes, lower case as encoding/json writes them.
const Hex = "0123456789abcdef"

// String appends s quoted as encoding/json does by default (HTML-safe, as json.Marshal and json.Encoder's
// default): ", \ and control characters escaped; <, > and & as \u003c, \u003e and \u0026; U+2028 and U+2029
// escaped; each byte of invalid UTF-8 as \ufffd.
func String(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', Hex[c>>4], Hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', Hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Float appends f as encoding/json's float64 encoder does: the shortest text that reads back as f, as ES6
// writes numbers ('e' notation below 1e-6 and from 1e21 on, exponents unpadded). ok is false, and b unchanged,
// for NaN and the infinities, which json.Marshal refuses.
func Float(b []byte, f float64) (_ []byte, ok bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // 1e-07 as 1e-7
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, true
}
