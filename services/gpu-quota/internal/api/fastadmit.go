package api

import (
	"strconv"
	"unicode/utf8"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
)

// decodeAdmit decodes an admission request as the Hub glue writes it (user, server, groups, resources,
// nodeSelector, profile; keys spelled so, once each; strings without escapes; whole GPU counts) in one pass,
// and reports false for anything else, which json.Decoder then decodes with its rules and errors: a waitlist
// choice, userOptions, null, another key. Its result is json.Decoder's for the same body; like the decoder, it
// reads one value and leaves what follows it.
//
// An admission is the request 64 spawns at once wait on, one after the other on a busy core; json.Decoder's
// reflection and its map handling were a fifth of the handler's CPU.
func decodeAdmit(body []byte) (admit.Request, bool) {
	d := scan{b: body}
	var r admit.Request
	if !d.next('{') {
		return r, false
	}
	if d.next('}') {
		return r, true
	}
	var seen uint8
	for {
		key, ok := d.key()
		if !ok {
			return r, false
		}
		var bit uint8
		switch string(key) {
		case "user":
			bit = 1
			r.User, ok = d.text()
		case "server":
			bit = 2
			r.Server, ok = d.text()
		case "profile":
			bit = 4
			r.Profile, ok = d.text()
		case "groups":
			bit = 8
			r.Groups, ok = d.strings()
		case "resources":
			bit = 16
			r.Resources, ok = d.counts()
		case "nodeSelector":
			bit = 32
			r.NodeSelector, ok = d.labels()
		}
		if !ok || bit == 0 || seen&bit != 0 {
			return admit.Request{}, false
		}
		seen |= bit
		if d.next('}') {
			return r, true
		}
		if !d.next(',') {
			return admit.Request{}, false
		}
	}
}

// scan reads JSON from b at i.
type scan struct {
	b []byte
	i int
}

func (d *scan) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next consumes c after white space.
func (d *scan) next(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// key reads an object's key and its colon.
func (d *scan) key() ([]byte, bool) {
	k, ok := d.str()
	return k, ok && d.next(':')
}

// str reads a string with no escape and no control character, in valid UTF-8 (which json would change or
// refuse), and returns its bytes without the quotes.
func (d *scan) str() ([]byte, bool) {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	start := d.i + 1
	ascii := true
	for i := start; i < len(d.b); i++ {
		switch c := d.b[i]; {
		case c == '"':
			s := d.b[start:i]
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			d.i = i + 1
			return s, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

func (d *scan) text() (string, bool) {
	s, ok := d.str()
	return string(s), ok
}

// strings reads an array of strings; [] is an empty slice, not nil (nil groups mean "ask the directory").
func (d *scan) strings() ([]string, bool) {
	if !d.next('[') {
		return nil, false
	}
	out := []string{}
	if d.next(']') {
		return out, true
	}
	for {
		s, ok := d.text()
		if !ok {
			return nil, false
		}
		out = append(out, s)
		if d.next(']') {
			return out, true
		}
		if !d.next(',') {
			return nil, false
		}
	}
}

// counts reads an object of whole numbers (no fraction, no exponent: json refuses those for an int64).
func (d *scan) counts() (map[string]int64, bool) {
	return object(d, func(d *scan) (int64, bool) {
		d.space()
		start, i := d.i, d.i
		if i < len(d.b) && d.b[i] == '-' {
			i++
		}
		digits := i
		for i < len(d.b) && d.b[i] >= '0' && d.b[i] <= '9' {
			i++
		}
		if i == digits || (d.b[digits] == '0' && i > digits+1) {
			return 0, false
		}
		if i < len(d.b) && (d.b[i] == '.' || d.b[i] == 'e' || d.b[i] == 'E') {
			return 0, false
		}
		v, err := strconv.ParseInt(string(d.b[start:i]), 10, 64)
		if err != nil {
			return 0, false
		}
		d.i = i
		return v, true
	})
}

// labels reads an object of strings.
func (d *scan) labels() (map[string]string, bool) { return object(d, (*scan).text) }

// object reads an object whose values value reads; a key given twice is left to json.
func object[V any](d *scan, value func(*scan) (V, bool)) (map[string]V, bool) {
	if !d.next('{') {
		return nil, false
	}
	out := map[string]V{}
	if d.next('}') {
		return out, true
	}
	for {
		key, ok := d.key()
		if !ok {
			return nil, false
		}
		v, ok := value(d)
		if !ok {
			return nil, false
		}
		n := len(out)
		if out[string(key)] = v; len(out) == n {
			return nil, false
		}
		if d.next('}') {
			return out, true
		}
		if !d.next(',') {
			return nil, false
		}
	}
}
