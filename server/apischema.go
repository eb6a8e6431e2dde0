package server

import (
	"fmt"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/racefree/racefree"
)

// The JSON Schemas of /openapi.json are built here from the definitions
// the handlers validate with, so that the document states the server's
// real limits:
//
//   - a request body's properties are the json fields of the very struct
//     its handler decodes into with unknown fields refused (decode), so
//     additionalProperties is false by construction; bodySchema panics
//     when a field has no schema or a schema names no field;
//   - lengths and ranges are the libraries' own constants
//     (claim.MaxKeyBytes, seq.MaxN, …), which the libraries check;
//   - a path parameter's pattern is the one the handler matches it with
//     (pathValuePattern, by validPathValue; sourceName).
//
// TestOpenAPIAgreesWithTheServer then sends, for every operation, requests
// the document allows and requests it refuses, and fails on any
// disagreement.

// maxBytesKeyword is the schema keyword that bounds a string in bytes of
// UTF-8, as every racefree limit on text counts; maxLength, which counts
// characters, is set to the same number and is then only a necessary
// condition.
const maxBytesKeyword = "x-max-bytes"

// noNULPattern is the pattern of text without a NUL byte, which racefree
// refuses on every engine ([racefree.CheckText]).
const noNULPattern = `^[^\x00]*$`

// pathValuePattern is the pattern of a path parameter that names a key
// (a claim's, an event's, a counter's, a quota's): text without a NUL
// byte that may hold "/" (sent as %2F) between segments, none of which is
// empty, "." or "..", since such a path is refused before any route
// (cleanPath). The handlers match the parameter against it (pathParam, by
// validPathValue).
const pathValuePattern = `^(?:[^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+)(?:/(?:[^/.\x00][^/\x00]*|\.[^/.\x00][^/\x00]*|\.\.[^/\x00]+))*$`

// validPathValue reports whether v matches pathValuePattern, without a
// regular expression: its segments between "/" are none of them empty,
// "." or "..", and hold no NUL byte. TestPathValueMatchesItsPattern holds
// it to the pattern.
func validPathValue(v string) bool {
	for {
		seg, rest, more := strings.Cut(v, "/")
		if seg == "" || seg == "." || seg == ".." || strings.IndexByte(seg, 0) >= 0 {
			return false
		}
		if !more {
			return true
		}
		v = rest
	}
}

// pathParam returns the path parameter name of r, refused unless it is 1
// to maxBytes bytes of UTF-8 matching pathValuePattern.
func pathParam(r *http.Request, name string, maxBytes int) (string, error) {
	v := r.PathValue(name)
	if err := racefree.CheckText(name, v, maxBytes); err != nil {
		return v, err
	}
	if !validPathValue(v) {
		return v, racefree.Invalid(name, "must not have an empty, . or .. segment between its / characters")
	}
	return v, nil
}

// textSchema is a string of 1 to maxBytes bytes of UTF-8 without a NUL
// byte: what [racefree.CheckText] accepts.
func textSchema(maxBytes int, description string) map[string]any {
	s := optionalTextSchema(maxBytes, description)
	s["minLength"] = 1
	return s
}

// optionalTextSchema is textSchema that may be empty: a field the server
// checks only when it is not empty.
func optionalTextSchema(maxBytes int, description string) map[string]any {
	s := map[string]any{"type": "string", "maxLength": maxBytes, maxBytesKeyword: maxBytes, "pattern": noNULPattern}
	if description != "" {
		s["description"] = description
	}
	return s
}

// pathTextSchema is a path parameter that names a key: textSchema with
// pathValuePattern.
func pathTextSchema(maxBytes int, description string) map[string]any {
	s := textSchema(maxBytes, description)
	s["pattern"] = pathValuePattern
	return s
}

// intSchema is an integer from min to max.
func intSchema(min, max int64, description string) map[string]any {
	s := map[string]any{"type": "integer", "minimum": min, "maximum": max}
	if description != "" {
		s["description"] = description
	}
	return s
}

// positive is an integer from 1 up, such as a fence or a message id.
func positive(description string) map[string]any { return intSchema(1, math.MaxInt64, description) }

// withDefault returns s with its default.
func withDefault(s map[string]any, v any) map[string]any {
	out := make(map[string]any, len(s)+1)
	for k, x := range s {
		out[k] = x
	}
	out["default"] = v
	return out
}

// bodySchema returns the JSON Schema of a request body that its handler
// decodes into a value of v's type: an object whose properties are the
// type's json fields, each with its schema in props, required those
// named, and no other property. It panics when a field has no schema or
// a schema no field, so that the two cannot drift.
func bodySchema(v any, required []string, props map[string]any) map[string]any {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var names []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			panic(fmt.Sprintf("bodySchema: %s.%s has no json name", t, t.Field(i).Name))
		}
		names = append(names, name)
		if _, ok := props[name]; !ok {
			panic(fmt.Sprintf("bodySchema: %s field %q has no schema", t, name))
		}
	}
	for name := range props {
		if !slices.Contains(names, name) {
			panic(fmt.Sprintf("bodySchema: %s has no field %q", t, name))
		}
	}
	for _, name := range required {
		if !slices.Contains(names, name) {
			panic(fmt.Sprintf("bodySchema: %s requires %q, which is no field", t, name))
		}
	}
	o := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

// documentedScope is the scope the document states for a /v1/ route
// (x-scope); TestOpenAPIAgreesWithTheServer checks it against
// Server.Scopes.
func documentedScope(pattern string) string {
	switch {
	case slices.Contains(adminRoutes, pattern), slices.Contains(adminOutboxRoutes, pattern):
		return "admin"
	case strings.HasPrefix(pattern, "GET "):
		return "read"
	}
	return "write"
}

// described is a schema of any JSON value, with its description.
func described(description string) map[string]any {
	return map[string]any{"description": description}
}

// base64Pattern is standard base64 with its padding, as
// base64.StdEncoding decodes it (line breaks, which it would skip, are
// refused).
const base64Pattern = `^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$`

// dateTimePattern is an RFC 3339 time as time.Parse takes it with
// time.RFC3339Nano (an upper-case T and Z; a day past its month's end is
// refused too, which the pattern does not say).
const dateTimePattern = `^[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$`
