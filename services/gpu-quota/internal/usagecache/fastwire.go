package usagecache

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"

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
func decodeFast(body []byte, prev map[string]map[string]map[string]float64) (wire, bool) {
	d := fastDecoder{b: body, classes: map[string]string{}}
	w, ok := d.answer(prev)
	if !ok {
		return wire{}, false
	}
	d.space()
	return w, d.i == len(d.b)
}

type fastDecoder struct {
	b    []byte
	i    int
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

func (d *fastDecoder) answer(prev map[string]map[string]map[string]float64) (wire, bool) {
	var w wire
	if !d.open() {
		return w, false
	}
	if d.close() {
		return w, true
	}
	var asOf, windows bool
	for {
		key, ok := d.key()
		if !ok {
			return w, false
		}
		switch string(key) {
		case "asOf":
			if asOf {
				return w, false
			}
			asOf = true
			d.space()
			start := d.i
			if _, ok := d.str(); !ok {
				return w, false
			}
			if err := w.AsOf.UnmarshalJSON(d.b[start:d.i]); err != nil {
				return w, false
			}
		case "windows":
			if windows {
				return w, false
			}
			windows = true
			var ok bool
			if w.Windows, ok = d.windows(prev); !ok {
				return w, false
			}
		default:
			return w, false
		}
		if d.close() {
			return w, true
		}
		if !d.comma() {
			return w, false
		}
	}
}

func (d *fastDecoder) windows(prev map[string]map[string]map[string]float64) (map[string]map[string]map[string]float64, bool) {
	out := map[string]map[string]map[string]float64{}
	if !d.open() {
		return nil, false
	}
	if d.close() {
		return out, true
	}
	for {
		key, ok := d.key()
		if !ok {
			return nil, false
		}
		window := string(key)
		if _, dup := out[window]; dup {
			return nil, false
		}
		if out[window], ok = d.users(prev[window]); !ok {
			return nil, false
		}
		if d.close() {
			return out, true
		}
		if !d.comma() {
			return nil, false
		}
	}
}

func (d *fastDecoder) users(prev map[string]map[string]float64) (map[string]map[string]float64, bool) {
	out := make(map[string]map[string]float64, len(prev))
	if !d.open() {
		return nil, false
	}
	if d.close() {
		return out, true
	}
	for {
		key, ok := d.key()
		if !ok {
			return nil, false
		}
		if !d.userHours() {
			return nil, false
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
			return nil, false // a user given twice
		}
		if n%32 == 0 {
			d.pace.Item() // a clock read per user would cost as much as the user
		}
		if d.close() {
			return out, true
		}
		if !d.comma() {
			return nil, false
		}
	}
}

// userHours reads one user's {class: hours} into d.hours; a class given twice is left to decodeWire.
func (d *fastDecoder) userHours() bool {
	d.hours = d.hours[:0]
	if !d.open() {
		return false
	}
	if d.close() {
		return true
	}
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		for _, h := range d.hours {
			if string(h.class) == string(key) {
				return false
			}
		}
		v, ok := d.number()
		if !ok {
			return false
		}
		d.hours = append(d.hours, classHours{class: key, hours: v})
		if d.close() {
			return true
		}
		if !d.comma() {
			return false
		}
	}
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

func (d *fastDecoder) space() {
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
func (d *fastDecoder) next(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *fastDecoder) open() bool  { return d.next('{') }
func (d *fastDecoder) close() bool { return d.next('}') }
func (d *fastDecoder) comma() bool { return d.next(',') }

// key reads an object's key and its colon.
func (d *fastDecoder) key() ([]byte, bool) {
	d.space()
	k, ok := d.str()
	return k, ok && d.next(':')
}

// str reads a string at d.i with no escape and no control character, in valid UTF-8 (which json.Unmarshal
// would change or refuse), and returns its bytes without the quotes.
func (d *fastDecoder) str() ([]byte, bool) {
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

// number reads a JSON number (RFC 8259's grammar, which strconv.ParseFloat alone does not hold to) that fits
// a float64.
func (d *fastDecoder) number() (float64, bool) {
	d.space()
	b, i := d.b, d.i
	start := i
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
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return 0, false
		}
	}
	v, err := strconv.ParseFloat(string(b[start:i]), 64)
	if err != nil {
		return 0, false
	}
	d.i = i
	return v, true
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
