// Package jsonscan reads JSON of a known shape in one pass over its bytes, for decoders that take the common
// case fast and leave the rest to encoding/json (gpu-quota's admission body and its usage poll). Its grammar
// is narrower than JSON's, never wider: a method reports false where the input leaves it (an escape, a
// control character, invalid UTF-8, a malformed number), and the caller then falls back to encoding/json,
// which decides and words the error.
package jsonscan

import "unicode/utf8"

// Scanner reads B from I.
type Scanner struct {
	B []byte
	I int
}

// Space skips JSON's white space (space, tab, line feed, carriage return).
func (s *Scanner) Space() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Next consumes c after white space.
func (s *Scanner) Next(c byte) bool {
	s.Space()
	if s.I < len(s.B) && s.B[s.I] == c {
		s.I++
		return true
	}
	return false
}

// End reports whether only white space is left.
func (s *Scanner) End() bool {
	s.Space()
	return s.I == len(s.B)
}

// Str reads a string after white space, one with no escape and no control character, in valid UTF-8 (which
// encoding/json would change or refuse), and returns its bytes without the quotes.
func (s *Scanner) Str() ([]byte, bool) {
	s.Space()
	if s.I >= len(s.B) || s.B[s.I] != '"' {
		return nil, false
	}
	start := s.I + 1
	ascii := true
	for i := start; i < len(s.B); i++ {
		switch c := s.B[i]; {
		case c == '"':
			str := s.B[start:i]
			if !ascii && !utf8.Valid(str) {
				return nil, false
			}
			s.I = i + 1
			return str, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// Key reads an object's key and its colon.
func (s *Scanner) Key() ([]byte, bool) {
	k, ok := s.Str()
	return k, ok && s.Next(':')
}

// Number reads a number after white space as RFC 8259 writes it (which strconv's parsers alone do not hold
// to: they take "+1", ".5", "0x10", "1_000", "Inf"), and returns its bytes and whether it is an integer (no
// fraction, no exponent: what encoding/json takes for an int64).
func (s *Scanner) Number() (num []byte, integer bool, ok bool) {
	s.Space()
	b, i := s.B, s.I
	digits := func() bool {
		from := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > from
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return nil, false, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		i++
		if integer = false; !digits() {
			return nil, false, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if integer = false; !digits() {
			return nil, false, false
		}
	}
	num, s.I = b[s.I:i], i
	return num, integer, true
}

// Object reads an object after white space, calling member with each key once its colon is read; member reads
// the value. It reports false where the input leaves the grammar or member returns false.
func (s *Scanner) Object(member func(key []byte) bool) bool {
	if !s.Next('{') {
		return false
	}
	if s.Next('}') {
		return true
	}
	for {
		key, ok := s.Key()
		if !ok || !member(key) {
			return false
		}
		if s.Next('}') {
			return true
		}
		if !s.Next(',') {
			return false
		}
	}
}

// Array reads an array after white space, calling elem to read each element.
func (s *Scanner) Array(elem func() bool) bool {
	if !s.Next('[') {
		return false
	}
	if s.Next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.Next(']') {
			return true
		}
		if !s.Next(',') {
			return false
		}
	}
}

// Skip passes over one value after white space: an object, an array, a string (as Str reads it), a number, or
// true, false or null.
func (s *Scanner) Skip() bool {
	s.Space()
	if s.I >= len(s.B) {
		return false
	}
	switch c := s.B[s.I]; {
	case c == '{':
		return s.Object(func([]byte) bool { return s.Skip() })
	case c == '[':
		return s.Array(s.Skip)
	case c == '"':
		_, ok := s.Str()
		return ok
	case c == '-' || c >= '0' && c <= '9':
		_, _, ok := s.Number()
		return ok
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(s.B)-s.I >= len(lit) && string(s.B[s.I:s.I+len(lit)]) == lit {
			s.I += len(lit)
			return true
		}
	}
	return false
}
