package server

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// flatTypes are flatPlans' types, in a fixed order.
func flatTypes() []reflect.Type {
	var out []reflect.Type
	for t := range flatPlans {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b reflect.Type) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// flatGood is a value decodeFlat takes for a field of kind k.
func flatGood(k flatKind) string {
	if k == flatString || k == flatStringPtr {
		return `"w"`
	}
	return `60000`
}

// flatValues are values for a field of kind k: the ones decodeFlat must
// take (a fast path that serves the hot routes), then every other.
func flatValues(k flatKind) (fast, others []string) {
	if k == flatString || k == flatStringPtr {
		return []string{`"w"`, `""`, `"é😀"`, "\"\u2028\"", "\"\x7f\"", `"<&>"`, `"a b/c"`},
			[]string{`"a\"b"`, `"a\\"`, `"a\u0041"`, `"\n"`, `"\/"`, "\"\x01\"", "\"\x00\"", "\"\t\"", "\"\xff\"", "\"\xc3\"", `"unterminated`,
				`1`, `null`, `true`, `[]`, `{}`, `["w"]`}
	}
	return []string{`0`, `-0`, `1`, `-1`, `60000`, `9223372036854775807`, `-9223372036854775808`},
		[]string{`01`, `-01`, `00`, `1.0`, `1e3`, `1E3`, `1e-3`, `-`, `+1`, `.1`, `1.`, `0x1`, `9223372036854775808`,
			`-9223372036854775809`, `18446744073709551616`, `99999999999999999999`, `"1"`, `null`, `true`, `[]`, `{}`, `1-`, `--1`}
}

// flatCorpus returns bodies for type t: those decodeFlat must decode, and
// every body it may or may not, which it must then decode as decodeStrict
// does, or leave to it.
func flatCorpus(t reflect.Type) (fast, all []string) {
	fields := flatPlans[t]
	obj := func(members ...string) string { return "{" + strings.Join(members, ",") + "}" }
	good := func(except int) []string {
		var ms []string
		for k, f := range fields {
			if k != except {
				ms = append(ms, `"`+f.name+`":`+flatGood(f.kind))
			}
		}
		return ms
	}
	fast = append(fast, obj(good(-1)...), "{}", " {\t}\r\n")
	for k, f := range fields {
		vf, vo := flatValues(f.kind)
		for _, v := range vf {
			fast = append(fast, obj(`"`+f.name+`":`+v), obj(append(good(k), `"`+f.name+`" :`+"\n"+v)...))
		}
		for _, v := range vo {
			all = append(all, obj(`"`+f.name+`":`+v), obj(append(good(k), `"`+f.name+`":`+v)...))
		}
		upper := strings.ToUpper(f.name[:1]) + f.name[1:]
		all = append(all,
			obj(`"`+upper+`":`+flatGood(f.kind)),                                    // another case
			obj(`"`+f.name+`":`+flatGood(f.kind), `"`+f.name+`":`+flatGood(f.kind)), // twice
			obj(`"`+f.name+`":`+flatGood(f.kind), `"`+f.name+`":null`),
			obj(slices.Repeat([]string{`"` + f.name + `":` + flatGood(f.kind)}, maxFlatFields+1)...), // more members than fields
			obj(fmt.Sprintf(`"\u%04x%s":%s`, f.name[0], f.name[1:], flatGood(f.kind))),               // an escape in the name
			`{"`+f.name+`":}`, `{"`+f.name+`" `+flatGood(f.kind)+`}`, `{"`+f.name+`":`+flatGood(f.kind)+`,}`,
			`{"`+f.name+`":`+flatGood(f.kind)+`}}`, `{"`+f.name+`":`+flatGood(f.kind)+` "x":1}`,
		)
	}
	all = append(all, obj(append(good(-1), `"zzz":1`)...), obj(`"":1`), obj(`"é":1`),
		"", " ", "null", " null ", "[]", "{", "}", "{}x", "{}{}", "{} {}", "{,}", `{"a"}`, `"x"`, "1", "{{}}",
		"\f{}", "{}\v", "\xef\xbb\xbf{}", "{}\x00", "\u00a0{}")
	return fast, append(all, fast...)
}

// flatAgrees checks body on type t: when decodeFlat takes it, decodeStrict
// takes it too and decodes the same value; when it does not, it left its
// destination untouched.
func flatAgrees(t *testing.T, typ reflect.Type, body []byte) (fast bool) {
	t.Helper()
	flat, strict := reflect.New(typ), reflect.New(typ)
	if !decodeFlat(body, flat.Interface()) {
		if !flat.Elem().IsZero() {
			t.Errorf("%v %q: decodeFlat refused the body but wrote %+v", typ, body, flat.Elem())
		}
		return false
	}
	if err := decodeStrict(body, strict.Interface()); err != nil {
		t.Errorf("%v %q: decodeFlat took a body decodeStrict refuses (%v): %+v", typ, body, err, flat.Elem())
	} else if !reflect.DeepEqual(flat.Interface(), strict.Interface()) {
		t.Errorf("%v %q: decodeFlat decoded %+v, decodeStrict %+v", typ, body, flat.Elem(), strict.Elem())
	}
	return true
}

// TestFlatDecodeAgreesWithTheStrictPath checks decodeFlat against
// decodeStrict on every flat request type: every body it takes decodes as
// decodeStrict decodes it (a member in another case, twice or null, an
// escape, a control character, invalid UTF-8, a fraction, an exponent,
// int64's bounds and one past them, trailing data and whitespace other
// than JSON's are left to decodeStrict), and the plain bodies clients send
// (and int64's bounds, multi-byte text) do take the short path.
func TestFlatDecodeAgreesWithTheStrictPath(t *testing.T) {
	t.Parallel()
	for _, want := range []any{acquireRequest{}, renewRequest{}, observeRequest{}, recordRequest{}} {
		if _, ok := flatPlans[reflect.TypeOf(want)]; !ok {
			t.Errorf("%T takes no short path", want)
		}
	}
	for _, typ := range flatTypes() {
		fast, all := flatCorpus(typ)
		for _, body := range fast {
			if !flatAgrees(t, typ, []byte(body)) {
				t.Errorf("%v %q: decodeFlat refused a plain body", typ, body)
			}
		}
		for _, body := range all {
			flatAgrees(t, typ, []byte(body))
		}
	}
}

// FuzzFlatDecode checks flatAgrees on any body and flat request type.
func FuzzFlatDecode(f *testing.F) {
	types := flatTypes()
	for k, typ := range types {
		_, all := flatCorpus(typ)
		for _, body := range all {
			f.Add([]byte(body), uint8(k))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, k uint8) {
		flatAgrees(t, types[int(k)%len(types)], body)
	})
}
