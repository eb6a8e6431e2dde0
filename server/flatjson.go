package server

import (
	"reflect"
	"strings"
	"unicode/utf8"
)

// The request bodies of the busiest routes (a claim's acquire and renew,
// an event's observation, a token's consumption, …) are flat JSON
// objects of strings and integers. decodeFlat decodes such a body without
// encoding/json's reflection over the JSON and its second pass
// (exactMembers), and hands every body it does not fully understand to
// that path (decodeStrict): what it accepts it decodes exactly as
// decodeStrict would, and everything else, every refusal included, is
// judged by decodeStrict. TestFlatDecodeAgreesWithTheStrictPath holds it
// to that.

// flatKind is the type of a field decodeFlat fills.
type flatKind uint8

const (
	flatString    flatKind = iota // string
	flatStringPtr                 // *string
	flatInt64                     // int64
	flatInt64Ptr                  // *int64
)

// flatField is a field of a request type: its json name, its index in
// the struct and its kind.
type flatField struct {
	name  string
	index int
	kind  flatKind
}

// maxFlatFields bounds the fields of a type decodeFlat decodes.
const maxFlatFields = 16

// flatPlans are the request types decodeFlat decodes, with their fields:
// a type whose every field is a string, an int64 or a pointer to one,
// named by a plain json tag. A type left out, or not flat, is decoded by
// decodeStrict alone.
var flatPlans = planFlat(acquireRequest{}, renewRequest{}, observeRequest{}, recordRequest{},
	checkpointRequest{}, nextRequest{}, issueRequest{}, consumeTokenRequest{}, rotateRequest{}, struct{}{})

func planFlat(types ...any) map[reflect.Type][]flatField {
	plans := map[reflect.Type][]flatField{}
	for _, v := range types {
		t := reflect.TypeOf(v)
		if fields, ok := flatFields(t); ok {
			plans[t] = fields
		}
	}
	return plans
}

// flatFields returns the fields of struct type t, and false when t is not
// flat.
func flatFields(t reflect.Type) ([]flatField, bool) {
	if t.Kind() != reflect.Struct || t.NumField() > maxFlatFields {
		return nil, false
	}
	var fields []flatField
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || f.Anonymous || opts != "" || !plainName(name) {
			return nil, false // a name or option encoding/json reads its own way
		}
		var kind flatKind
		switch f.Type {
		case reflect.TypeFor[string]():
			kind = flatString
		case reflect.TypeFor[*string]():
			kind = flatStringPtr
		case reflect.TypeFor[int64]():
			kind = flatInt64
		case reflect.TypeFor[*int64]():
			kind = flatInt64Ptr
		default:
			return nil, false
		}
		fields = append(fields, flatField{name: name, index: i, kind: kind})
	}
	return fields, true
}

// plainName reports whether a json name is lower-case ASCII letters,
// digits and underscores.
func plainName(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return name != ""
}

// decodeFlat decodes body into v, a pointer to a type of flatPlans, and
// reports whether it did. It does only for a body that is one JSON object,
// with JSON whitespace around and between its tokens, whose members are
// distinct, each named exactly as a field, each value a string of valid
// UTF-8 without an escape or a control character for a string field, or
// an integer without fraction or exponent within int64 for an int64
// field. Otherwise it leaves v untouched.
func decodeFlat(body []byte, v any) bool {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return false
	}
	fields, ok := flatPlans[rv.Type().Elem()]
	if !ok {
		return false
	}
	type member struct {
		field *flatField
		str   string
		n     int64
	}
	var (
		got  [maxFlatFields]member
		n    int
		seen uint32
	)
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		i++
	} else {
		for {
			key, j, ok := plainString(body, i)
			if !ok {
				return false
			}
			f := -1
			for k := range fields {
				if string(key) == fields[k].name {
					f = k
					break
				}
			}
			if f < 0 || seen&(1<<f) != 0 {
				return false // unknown, in another case, or twice
			}
			seen |= 1 << f
			i = skipSpace(body, j)
			if i == len(body) || body[i] != ':' {
				return false
			}
			i = skipSpace(body, i+1)
			m := member{field: &fields[f]}
			switch m.field.kind {
			case flatString, flatStringPtr:
				s, j, ok := plainString(body, i)
				if !ok {
					return false
				}
				m.str, i = string(s), j
			default:
				v, j, ok := plainInt(body, i)
				if !ok {
					return false
				}
				m.n, i = v, j
			}
			got[n] = m
			n++
			i = skipSpace(body, i)
			if i == len(body) {
				return false
			}
			if body[i] == '}' {
				i++
				break
			}
			if body[i] != ',' {
				return false
			}
			i = skipSpace(body, i+1)
		}
	}
	if skipSpace(body, i) != len(body) {
		return false // trailing data
	}
	dst := rv.Elem()
	for _, m := range got[:n] {
		fv := dst.Field(m.field.index)
		switch m.field.kind {
		case flatString:
			fv.SetString(m.str)
		case flatStringPtr:
			s := m.str
			fv.Set(reflect.ValueOf(&s))
		case flatInt64:
			fv.SetInt(m.n)
		case flatInt64Ptr:
			v := m.n
			fv.Set(reflect.ValueOf(&v))
		}
	}
	return true
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainString reads the JSON string that starts at b[i] and returns its
// bytes and the index after it; false when there is none, or when it holds
// an escape, a control character or invalid UTF-8 (which encoding/json
// would decode to other bytes, or refuse).
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i == len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			return s, j + 1, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// plainInt reads the JSON integer that starts at b[i] (an optional minus,
// then 0 or digits without a leading 0) and returns it and the index after
// it; false when there is none, or when it does not fit in an int64 (which
// encoding/json refuses for an int64). A fraction or an exponent after it
// is no separator, which decodeFlat refuses.
func plainInt(b []byte, i int) (int64, int, bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var u uint64
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if u > (1<<63)/10 {
			return 0, 0, false
		}
		u = u*10 + uint64(b[i]-'0')
		if u > 1<<63 {
			return 0, 0, false
		}
	}
	switch {
	case i == start, b[start] == '0' && i > start+1:
		return 0, 0, false // no digit, or a leading 0
	case neg:
		return -int64(u), i, true // -(1<<63) wraps to itself: math.MinInt64
	case u > 1<<63-1:
		return 0, 0, false
	}
	return int64(u), i, true
}
