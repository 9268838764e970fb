package usagecache

import (
	"math"
	"strconv"
	"time"

	"github.com/gpuhub/gpuhub/services/internal/contract"
	"github.com/gpuhub/gpuhub/services/internal/jsonscan"
	"github.com/gpuhub/gpuhub/services/internal/yield"
)

// decodeFast decodes the answer as the usage API writes it ({"asOf": ..., "windows": {window: {user: {class:
// hours}}}}, keys spelled so, once each, strings without escapes) in one pass over the bytes, and reports false
// for anything else: decodeWire then decodes it, with json.Unmarshal's rules and errors. Its result is what
// json.Unmarshal gives for the same body.
//
// A user whose hours in a window are those of prev (the last answer, by window parameter) gets prev's map:
// between two polls most users' hours do not change, and the answers' maps are read-only. A poll of 10,000 users
// then allocates little more than the three user maps, instead of a map per user and window.
func decodeFast(body []byte, prev map[string]map[string]map[string]float64, behind *yield.Foreground) (contract.RollingResponse, bool) {
	d := fastDecoder{Scanner: jsonscan.Scanner{B: body}, classes: map[string]string{}, pace: yield.Pass{Behind: behind}}
	w, ok := d.answer(prev)
	if !ok || !d.End() {
		return contract.RollingResponse{}, false
	}
	return w, true
}

type fastDecoder struct {
	jsonscan.Scanner
	pace yield.Pass
	// classes interns class names: a handful, repeated in every user's hours.
	classes map[string]string
	// hours is the user being read: the class and its hours, in the body's order.
	hours []classHours
}

type classHours struct {
	class []byte
	hours float64
}

func (d *fastDecoder) answer(prev map[string]map[string]map[string]float64) (contract.RollingResponse, bool) {
	var w contract.RollingResponse
	var asOf, windows bool
	ok := d.Object(func(key []byte) bool {
		switch string(key) {
		case "asOf":
			if asOf {
				return false
			}
			asOf = true
			d.Space()
			start := d.I
			_, ok := d.Str()
			return ok && w.AsOf.UnmarshalJSON(d.B[start:d.I]) == nil
		case "windows":
			if windows {
				return false
			}
			windows = true
			var ok bool
			w.Windows, ok = d.windows(prev)
			return ok
		}
		return false // another key, or one in another case: decodeWire
	})
	return w, ok
}

func (d *fastDecoder) windows(prev map[string]map[string]map[string]float64) (map[string]map[string]map[string]float64, bool) {
	out := map[string]map[string]map[string]float64{}
	ok := d.Object(func(key []byte) bool {
		users, ok := d.users(prev[string(key)])
		n := len(out)
		out[string(key)] = users
		return ok && len(out) > n // a window given twice: decodeWire
	})
	return out, ok
}

func (d *fastDecoder) users(prev map[string]map[string]float64) (map[string]map[string]float64, bool) {
	out := make(map[string]map[string]float64, len(prev))
	ok := d.Object(func(key []byte) bool {
		if !d.userHours() {
			return false
		}
		hours, had := prev[string(key)]
		if !had || !d.same(hours) {
			hours = make(map[string]float64, len(d.hours))
			for _, h := range d.hours {
				hours[d.class(h.class)] = h.hours
			}
		}
		n := len(out)
		if out[string(key)] = hours; len(out) == n {
			return false // a user given twice
		}
		if n%32 == 0 {
			d.pace.Item() // a clock read per user would cost as much as the user
		}
		return true
	})
	return out, ok
}

// userHours reads one user's {class: hours} into d.hours; a class given twice is left to decodeWire.
func (d *fastDecoder) userHours() bool {
	d.hours = d.hours[:0]
	return d.Object(func(key []byte) bool {
		for _, h := range d.hours {
			if string(h.class) == string(key) {
				return false
			}
		}
		v, ok := d.number()
		d.hours = append(d.hours, classHours{class: key, hours: v})
		return ok
	})
}

// same reports whether old holds exactly d.hours (bit for bit: -0 is not 0). A nil map (a user who was null
// in the last answer) is not the empty map {} decodes to.
func (d *fastDecoder) same(old map[string]float64) bool {
	if old == nil || len(old) != len(d.hours) {
		return false
	}
	for _, h := range d.hours {
		v, ok := old[string(h.class)]
		if !ok || math.Float64bits(v) != math.Float64bits(h.hours) {
			return false
		}
	}
	return true
}

func (d *fastDecoder) class(b []byte) string {
	if s, ok := d.classes[string(b)]; ok {
		return s
	}
	s := string(b)
	d.classes[s] = s
	return s
}

// number reads a JSON number that fits a float64.
func (d *fastDecoder) number() (float64, bool) {
	num, _, ok := d.Number()
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(num), 64)
	return v, err == nil
}

// prevByParam is a's hours by the windows parameter that asked for them, for decodeFast.
func prevByParam(a *answer, windows []time.Duration, params []string) map[string]map[string]map[string]float64 {
	if a == nil {
		return nil
	}
	out := make(map[string]map[string]map[string]float64, len(windows))
	for i, w := range windows {
		if h, ok := a.hours[w]; ok {
			out[params[i]] = h
		}
	}
	return out
}
