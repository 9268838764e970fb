package api

import (
	"strconv"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/internal/jsonscan"
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
	d := scan{jsonscan.Scanner{B: body}}
	var r admit.Request
	var seen uint8
	ok := d.Object(func(key []byte) bool {
		var bit uint8
		ok := false
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
			r.Resources, ok = object(&d, (*scan).count)
		case "nodeSelector":
			bit = 32
			r.NodeSelector, ok = object(&d, (*scan).text)
		}
		if !ok || seen&bit != 0 { // another key, or one given twice: json.Decoder's rules
			return false
		}
		seen |= bit
		return true
	})
	if !ok {
		return admit.Request{}, false
	}
	return r, true
}

// scan is jsonscan's Scanner with the admission request's values.
type scan struct{ jsonscan.Scanner }

func (d *scan) text() (string, bool) {
	s, ok := d.Str()
	return string(s), ok
}

// strings reads an array of strings; [] is an empty slice, not nil (nil groups mean "ask the directory").
func (d *scan) strings() ([]string, bool) {
	out := []string{}
	ok := d.Array(func() bool {
		s, ok := d.text()
		out = append(out, s)
		return ok
	})
	return out, ok
}

// count reads a whole number (no fraction, no exponent: json refuses those for an int64).
func (d *scan) count() (int64, bool) {
	num, integer, ok := d.Number()
	if !ok || !integer {
		return 0, false
	}
	v, err := strconv.ParseInt(string(num), 10, 64)
	return v, err == nil
}

// object reads an object whose values value reads; a key given twice is left to json.
func object[V any](d *scan, value func(*scan) (V, bool)) (map[string]V, bool) {
	out := map[string]V{}
	ok := d.Object(func(key []byte) bool {
		v, ok := value(d)
		n := len(out)
		out[string(key)] = v
		return ok && len(out) > n
	})
	return out, ok
}
