package server_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/big"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/message"
)

// TestOpenAPIAgreesWithTheServer fuzzes every operation of the served
// /openapi.json against a live server (httptest, over HTTP) on both
// engines, in both directions, with a bounded, deterministic set of
// requests made from the document's own schemas: for each parameter and
// body property its example, each enum value, its boundaries and one
// past them, the longest text in ASCII and in multi-byte UTF-8, text one
// byte too long in characters the schema's maxLength still allows, a NUL
// byte, a wrong type, null, absent and present; an extra property, a
// property in another case, a body that is not an object; path
// parameters out of their pattern.
//
// Whether a request is valid is decided by the document alone, with an
// independent JSON Schema 2020-12 validator (x-max-bytes included), plus
// the few cross-field limits the descriptions state in words (crossField).
// A valid request must be answered a documented status other than 400,
// 413, 415 or 422; an invalid one 400 invalid-input (a signed delivery's
// bad headers: 401 bad-signature). Every answer's status must be
// documented for its operation, its body must match the documented schema
// with no undocumented member, and an error must be problem+json of a type
// its response lists. RACEFREE_OPENAPI_CASES=N keeps the first N cases of
// each operation (default: all).
func TestOpenAPIAgreesWithTheServer(t *testing.T) {
	t.Parallel()
	testdb.Each(t, nil, func(t *testing.T, db *racefree.DB) {
		s := server.New(db, server.Options{AuditKeys: auditRing(t, true), InboxSecrets: map[string][]string{"src": {conformanceSecret}},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		ts := httptest.NewServer(s.Handler())
		defer ts.Close()
		o := newOracle(t, ts.URL)

		// The scopes the document states are the server's.
		for pattern, scope := range s.Scopes() {
			if got := o.scopeOf(pattern); got != scope {
				t.Errorf("%s: x-scope %q, the server needs %q", pattern, got, scope)
			}
		}

		limit := math.MaxInt
		if n, err := strconv.Atoi(os.Getenv("RACEFREE_OPENAPI_CASES")); err == nil && n > 0 {
			limit = n
		}
		var valid, invalid int
		o.methodsNotServed(t)
		for _, op := range o.operations() {
			cases := o.cases(t, op)
			if len(cases) > limit {
				cases = cases[:limit]
			}
			var v, iv int
			for _, c := range cases {
				ok, why := o.classify(t, op, c)
				if ok {
					v++
				} else {
					iv++
				}
				o.judge(t, op, c, ok, why, o.send(t, op, c))
			}
			t.Logf("%s: %d valid, %d invalid; answers %v", op, v, iv, o.statuses)
			o.statuses = map[int]int{}
			if v == 0 || (iv == 0 && op.hasInput()) {
				t.Errorf("%s: %d valid and %d invalid requests: the generator misses a direction", op, v, iv)
			}
			valid, invalid = valid+v, invalid+iv
		}
		t.Logf("%d operations: %d valid and %d invalid requests", len(o.operations()), valid, invalid)
	})
}

// conformanceSecret is the inbox secret of the source "src".
var conformanceSecret = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 24))

// operation is one operation of the document.
type operation struct {
	method, path string
	pointer      string // JSON pointer of the operation object
	op           map[string]any
	params       []map[string]any // resolved
	body         map[string]any   // the requestBody object, or nil
}

func (op *operation) String() string { return strings.ToUpper(op.method) + " " + op.path }

func (op *operation) hasInput() bool {
	for _, p := range op.params {
		if p["in"] != "header" || p["name"] != "X-Request-Id" && p["name"] != "Idempotency-Key" {
			return true
		}
	}
	return op.body != nil
}

// signed reports whether op is the webhook delivery, authenticated by
// its signature.
func (op *operation) signed() bool { return op.method == "post" && op.path == "/v1/inbox/{source}" }

// request is one request of a case: its parameters by location and
// name (absent when not in the map) and its body.
type request struct {
	name   string
	path   map[string]any
	query  map[string]any
	header map[string]string
	body   any  // JSON value; ignored when noBody or raw
	noBody bool // send no body
	raw    *string
}

func (r request) clone(name string) request {
	c := request{name: name, path: map[string]any{}, query: map[string]any{}, header: map[string]string{},
		body: cloneJSON(r.body), noBody: r.noBody, raw: r.raw}
	for k, v := range r.path {
		c.path[k] = v
	}
	for k, v := range r.query {
		c.query[k] = v
	}
	for k, v := range r.header {
		c.header[k] = v
	}
	return c
}

func cloneJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = cloneJSON(e)
		}
		return m
	case []any:
		return slices.Clone(x)
	}
	return v
}

// oracle holds the served document and its compiled schemas.
type oracle struct {
	base     string
	doc      map[string]any
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
	seq      int
	statuses map[int]int // of the operation's answers so far
}

func newOracle(t *testing.T, base string) *oracle {
	t.Helper()
	res, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /openapi.json: %d %v", res.StatusCode, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertVocabs()
	c.RegisterVocabulary(maxBytesVocabulary(t))
	if err := c.AddResource("urn:racefree:openapi", doc); err != nil {
		t.Fatal(err)
	}
	return &oracle{base: base, doc: doc.(map[string]any), compiler: c, schemas: map[string]*jsonschema.Schema{}, statuses: map[int]int{}}
}

// schema compiles the schema at JSON pointer ptr of the document.
func (o *oracle) schema(t *testing.T, ptr string) *jsonschema.Schema {
	t.Helper()
	if s, ok := o.schemas[ptr]; ok {
		return s
	}
	s, err := o.compiler.Compile("urn:racefree:openapi#" + ptr)
	if err != nil {
		t.Fatalf("the schema at %s does not compile: %v", ptr, err)
	}
	o.schemas[ptr] = s
	return s
}

// at returns the value at JSON pointer ptr of the document.
func (o *oracle) at(ptr string) any {
	var v any = o.doc
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		m, _ := v.(map[string]any)
		v = m[tok]
	}
	return v
}

// resolve follows a $ref of the document.
func (o *oracle) resolve(v any) (map[string]any, string) {
	m, _ := v.(map[string]any)
	if r, ok := m["$ref"].(string); ok {
		ptr := strings.TrimPrefix(r, "#")
		m, _ := o.at(ptr).(map[string]any)
		return m, ptr
	}
	return m, ""
}

func escape(tok string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(tok) }

func (o *oracle) operations() []*operation {
	var ops []*operation
	paths := o.doc["paths"].(map[string]any)
	for path, item := range paths {
		for method, raw := range item.(map[string]any) {
			op := &operation{method: method, path: path, op: raw.(map[string]any),
				pointer: "/paths/" + escape(path) + "/" + method}
			params, _ := op.op["parameters"].([]any)
			for i, p := range params {
				m, ptr := o.resolve(p)
				if ptr == "" {
					ptr = op.pointer + "/parameters/" + strconv.Itoa(i)
				}
				m = maps(m, "x-pointer", ptr)
				op.params = append(op.params, m)
			}
			op.body, _ = op.op["requestBody"].(map[string]any)
			ops = append(ops, op)
		}
	}
	// Writes first, reads after them, deletes last: so that a read finds
	// what the writes' examples made (a listing with entries, a claim, a
	// message) and its answer's items are judged against their schema,
	// not only an empty list or a 404.
	rank := map[string]int{"post": 0, "put": 1, "patch": 2, "get": 3, "delete": 4}
	sort.Slice(ops, func(i, j int) bool {
		if ri, rj := rank[ops[i].method], rank[ops[j].method]; ri != rj {
			return ri < rj
		}
		return ops[i].String() < ops[j].String()
	})
	return ops
}

// maps returns a copy of m with k set to v.
func maps(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for key, x := range m {
		out[key] = x
	}
	out[k] = v
	return out
}

func (o *oracle) scopeOf(pattern string) string {
	method, path, _ := strings.Cut(pattern, " ")
	op, _ := o.at("/paths/" + escape(path) + "/" + strings.ToLower(method)).(map[string]any)
	s, _ := op["x-scope"].(string)
	return s
}

// bodyPointer is the JSON pointer of op's JSON body schema, or "".
func (op *operation) bodyPointer() string {
	if op.body == nil {
		return ""
	}
	content, _ := op.body["content"].(map[string]any)
	if _, ok := content["application/json"]; !ok {
		return ""
	}
	return op.pointer + "/requestBody/content/application~1json/schema"
}

// ---- Making requests from the schemas ----

// example returns a value valid for schema s (at pointer ptr), or false.
func (o *oracle) example(t *testing.T, s map[string]any, ptr string) (any, bool) {
	if r, p := o.resolve(s); p != "" {
		s, ptr = r, p
	}
	valid := func(v any) bool { return ptr == "" || o.schema(t, ptr).Validate(v) == nil }
	if v, ok := s["const"]; ok {
		return v, true
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0], true
	}
	switch s["type"] {
	case "string":
		n := 1
		if m, ok := num(s["minLength"]); ok && m > 1 {
			n = int(m)
		}
		for _, v := range []string{"src", strings.Repeat("k", n), "1", "2020-01-02T15:04:05Z", "QUJD"} {
			if valid(v) {
				return v, true
			}
		}
		return nil, false
	case "integer":
		lo, hasLo := num(s["minimum"])
		v := int64(1)
		if hasLo && lo > 1 {
			v = lo
		}
		if hi, ok := num(s["maximum"]); ok && v > hi {
			v = hi
		}
		return json.Number(strconv.FormatInt(v, 10)), true
	case "boolean":
		return false, true
	case "object":
		props, _ := s["properties"].(map[string]any)
		obj := map[string]any{}
		req, _ := s["required"].([]any)
		for _, name := range req {
			v, ok := o.example(t, props[name.(string)].(map[string]any), join(ptr, "properties", name.(string)))
			if !ok {
				return nil, false
			}
			obj[name.(string)] = v
		}
		if valid(obj) {
			return obj, true
		}
		for _, name := range sortedKeys(props) {
			if _, ok := obj[name]; !ok {
				if v, ok := o.example(t, props[name].(map[string]any), join(ptr, "properties", name)); ok {
					obj[name] = v
				}
			}
		}
		return obj, valid(obj)
	case nil:
		return map[string]any{"a": json.Number("1")}, true
	}
	return nil, false
}

func join(ptr string, toks ...string) string {
	if ptr == "" {
		return ""
	}
	for _, t := range toks {
		ptr += "/" + escape(t)
	}
	return ptr
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func num(v any) (int64, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	case float64:
		return int64(x), true
	}
	return 0, false
}

// variants returns values to try for a value of schema s: each enum
// value, the boundaries and one past them, long text, a NUL byte, a wrong
// type, null. Whether each is valid is the validator's to say.
func (o *oracle) variants(s map[string]any) []namedValue {
	if r, p := o.resolve(s); p != "" {
		s = r
	}
	var out []namedValue
	add := func(name string, v any) { out = append(out, namedValue{name, v}) }
	if e, ok := s["enum"].([]any); ok {
		for _, v := range e {
			add(fmt.Sprintf("enum %v", v), v)
		}
		add("not in the enum", "zz-not-listed")
	}
	if v, ok := s["const"]; ok {
		add("the const", v)
	}
	switch s["type"] {
	case "string":
		if _, ok := s["enum"]; ok {
			break
		}
		maxBytes, hasMax := num(s[maxBytes])
		if m, ok := num(s["maxLength"]); ok && !hasMax {
			maxBytes, hasMax = m, true
		}
		if min, ok := num(s["minLength"]); ok && min > 0 {
			add("one character short", strings.Repeat("k", int(min)-1))
		} else {
			add("empty", "")
		}
		if hasMax {
			add("longest, ASCII", strings.Repeat("k", int(maxBytes)))
			add("longest, multi-byte", strings.Repeat("é", int(maxBytes)/2)+strings.Repeat("k", int(maxBytes)%2))
			add("one byte too long, ASCII", strings.Repeat("k", int(maxBytes)+1))
			add("one byte too long, multi-byte within maxLength", strings.Repeat("é", int(maxBytes)/2+1))
		}
		add("a NUL byte", "k\x00k")
		if p, _ := s["pattern"].(string); p != `^[^\x00]*$` {
			// A pattern of its own: what paths and names trip on.
			add("a dot", ".")
			add("two dots", "..")
			add("a slash inside", "k/k")
			add("a trailing slash", "k/")
			add("an empty segment", "k//k")
			add("a space", "k k")
		}
		add("a number instead", json.Number("7"))
	case "integer":
		lo, hasLo := num(s["minimum"])
		hi, hasHi := num(s["maximum"])
		if hasLo {
			add("the minimum", json.Number(strconv.FormatInt(lo, 10)))
			add("one below the minimum", bigNumber(lo, -1))
		}
		if hasHi {
			add("the maximum", json.Number(strconv.FormatInt(hi, 10)))
			add("one above the maximum", bigNumber(hi, 1))
		}
		add("a string instead", "1")
		add("a fraction", json.Number("1.5"))
	case "boolean":
		add("true", true)
		add("false", false)
		add("a string instead", "true")
	case "object":
		add("an array instead", []any{})
		if ap, ok := s["additionalProperties"].(map[string]any); ok && len(ap) > 0 {
			add("one member", map[string]any{"X-Trace": "1"})
			add("a reserved name", map[string]any{"Racefree-Attempt": "1"})
			add("a name that is no token", map[string]any{"X Trace": "1"})
			add("a value with a line break", map[string]any{"X-Trace": "a\nb"})
			many := map[string]any{}
			for i := range 65 {
				many["X-"+strconv.Itoa(i)] = "1"
			}
			add("65 members", many)
		}
	case nil:
		add("an array", []any{json.Number("1")})
		add("a string", "text")
	}
	add("null", nil)
	return out
}

// maxBytes is the document's byte bound on text.
const maxBytes = "x-max-bytes"

type namedValue struct {
	name  string
	value any
}

// bigNumber is n+d as a JSON number, past the 64-bit range if it must.
func bigNumber(n, d int64) json.Number {
	b := new(big.Int).Add(big.NewInt(n), big.NewInt(d))
	return json.Number(b.String())
}

// cases returns op's requests: a valid base, then one change at a time.
func (o *oracle) cases(t *testing.T, op *operation) []request {
	t.Helper()
	base := request{name: "the example", path: map[string]any{}, query: map[string]any{}, header: map[string]string{}}
	for _, p := range op.params {
		name, in := p["name"].(string), p["in"].(string)
		if in == "header" && (name == "X-Request-Id" || name == "Idempotency-Key") || op.signed() && in == "header" {
			continue
		}
		v, ok := o.example(t, p["schema"].(map[string]any), p["x-pointer"].(string)+"/schema")
		if !ok {
			t.Fatalf("%s: no example for parameter %s", op, name)
		}
		if p["required"] == true || in == "path" {
			base.set(in, name, v)
		}
	}
	if ptr := op.bodyPointer(); ptr != "" {
		if op.body["required"] == true {
			v, ok := o.example(t, o.at(ptr).(map[string]any), ptr)
			if !ok {
				t.Fatalf("%s: no example for its body", op)
			}
			base.body = v
		} else {
			base.noBody = true
		}
	} else if op.signed() {
		raw := `{"type":"ping"}`
		base.raw = &raw
	} else {
		base.noBody = true
	}
	cases := []request{base}

	// Parameters, one at a time.
	for _, p := range op.params {
		name, in := p["name"].(string), p["in"].(string)
		if in == "header" {
			continue
		}
		schema := p["schema"].(map[string]any)
		if in == "query" {
			c := base.clone("query " + name + " absent")
			delete(c.query, name)
			cases = append(cases, c)
		}
		for _, v := range o.variants(schema) {
			if v.value == nil || in == "path" && v.value == "" {
				continue // no null in a URL; an empty path segment is another route
			}
			c := base.clone(in + " " + name + ": " + v.name)
			c.set(in, name, v.value)
			cases = append(cases, c)
		}
		if in == "query" {
			c := base.clone("query " + name + ": not a number")
			c.set(in, name, "1x")
			cases = append(cases, c)
		}
	}
	if op.signed() {
		for _, h := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			c := base.clone("header " + h + " absent")
			c.header["-"+h] = ""
			cases = append(cases, c)
		}
		c := base.clone("header webhook-id: one byte too long")
		c.header["webhook-id"] = strings.Repeat("k", 256)
		cases = append(cases, c)
		c = base.clone("header webhook-id: the longest")
		c.header["webhook-id"] = strings.Repeat("k", 255)
		cases = append(cases, c)
	}

	// The body, one property at a time, and as a whole.
	if ptr := op.bodyPointer(); ptr != "" {
		schema := o.at(ptr).(map[string]any)
		if base.noBody {
			c := base.clone("body {}")
			c.noBody, c.body = false, map[string]any{}
			cases = append(cases, c)
			c = base.clone("body {} with an extra property")
			c.noBody, c.body = false, map[string]any{"zz_extra": json.Number("1")}
			cases = append(cases, c)
		} else {
			cases = append(cases, o.bodyCases(base, schema, nil)...)
			for _, v := range []namedValue{{"an array", []any{}}, {"a string", "x"}, {"null", nil}} {
				c := base.clone("body: " + v.name)
				c.body = v.value
				cases = append(cases, c)
			}
			c := base.clone("no body")
			c.noBody = true
			cases = append(cases, c)
		}
	}

	// With an Idempotency-Key.
	for _, p := range op.params {
		if p["name"] == "Idempotency-Key" {
			c := base.clone("with an Idempotency-Key")
			c.header["Idempotency-Key"] = "\"conformance-" + strconv.Itoa(len(cases)) + "\""
			cases = append(cases, c)
		}
	}
	return cases
}

// bodyCases changes the object at path (nil: the body) of base one
// property at a time.
func (o *oracle) bodyCases(base request, schema map[string]any, path []string) []request {
	var cases []request
	where := strings.Join(path, ".")
	if where != "" {
		where += "."
	}
	props, _ := schema["properties"].(map[string]any)
	for _, name := range sortedKeys(props) {
		ps, _ := o.resolve(props[name])
		if ps == nil {
			ps = props[name].(map[string]any)
		}
		c := base.clone("body " + where + name + " absent")
		if obj := c.object(path); obj != nil {
			delete(obj, name)
			cases = append(cases, c)
		}
		for _, v := range o.variants(ps) {
			c := base.clone("body " + where + name + ": " + v.name)
			if obj := c.object(path); obj != nil {
				obj[name] = v.value
				cases = append(cases, c)
			}
		}
		if ps["type"] == "object" && ps["properties"] != nil {
			if obj := base.object(path); obj != nil {
				if _, ok := obj[name].(map[string]any); ok {
					cases = append(cases, o.bodyCases(base, ps, append(slices.Clone(path), name))...)
				}
			}
		}
		c = base.clone("body " + where + name + " in another case")
		if obj := c.object(path); obj != nil {
			if v, ok := obj[name]; ok {
				delete(obj, name)
				obj[strings.ToUpper(name[:1])+name[1:]] = v
				cases = append(cases, c)
			}
		}
	}
	c := base.clone("body " + where + "with an extra property")
	if obj := c.object(path); obj != nil {
		obj["zz_extra"] = json.Number("1")
		cases = append(cases, c)
	}
	return cases
}

// object returns the body's object at path, or nil.
func (r *request) object(path []string) map[string]any {
	obj, _ := r.body.(map[string]any)
	for _, p := range path {
		obj, _ = obj[p].(map[string]any)
	}
	return obj
}

func (r *request) set(in, name string, v any) {
	switch in {
	case "path":
		r.path[name] = v
	case "query":
		r.query[name] = v
	}
}

// ---- Judging ----

// classify says whether the document allows c, and if not why.
func (o *oracle) classify(t *testing.T, op *operation, c request) (bool, string) {
	for _, p := range op.params {
		name, in := p["name"].(string), p["in"].(string)
		var (
			v       any
			present bool
		)
		switch in {
		case "path":
			v, present = c.path[name]
		case "query":
			v, present = c.query[name]
		default:
			continue
		}
		if !present {
			if p["required"] == true {
				return false, in + " " + name + " is required"
			}
			continue
		}
		if err := o.schema(t, p["x-pointer"].(string)+"/schema").Validate(asParameter(v, p["schema"].(map[string]any), o)); err != nil {
			return false, in + " " + name + ": " + err.Error()
		}
	}
	if op.signed() {
		for _, h := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			if _, absent := c.header["-"+h]; absent {
				return false, "header " + h + " is required"
			}
		}
		if len(c.header["webhook-id"]) > 255 {
			return false, "header webhook-id is longer than 255 bytes"
		}
	}
	if ptr := op.bodyPointer(); ptr != "" {
		switch {
		case c.noBody && op.body["required"] == true:
			return false, "the body is required"
		case !c.noBody:
			if err := o.schema(t, ptr).Validate(c.body); err != nil {
				return false, "body: " + err.Error()
			}
			if why := crossField(op, c.body); why != "" {
				return false, why
			}
		}
	}
	return true, ""
}

// asParameter turns a parameter's value, which travels as text, into
// the JSON value its schema judges: a number for an integer schema when
// it is one.
func asParameter(v any, schema map[string]any, o *oracle) any {
	s, _ := o.resolve(schema)
	if s == nil {
		s = schema
	}
	text := fmt.Sprint(v)
	if s["type"] == "integer" {
		if n := json.Number(text); isInteger(text) {
			return n
		}
	}
	return text
}

func isInteger(s string) bool {
	if s == "" {
		return false
	}
	if s[0] == '-' {
		s = s[1:]
	}
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// crossField returns the limit, stated in a schema's description only,
// that body breaks, or "": the limits across fields that JSON Schema
// cannot state.
func crossField(op *operation, body any) string {
	b, _ := body.(map[string]any)
	if op.path != "/v1/quotas/{key}/consume" || b == nil {
		return ""
	}
	p, _ := b["policy"].(map[string]any)
	get := func(m map[string]any, k string, def int64) int64 {
		n, ok := num(m[k])
		if !ok {
			return def
		}
		return n
	}
	kind, rate, per, burst := p["kind"], get(p, "rate", 0), get(p, "per_ms", 1), get(p, "burst", 0)
	limit := rate
	switch kind {
	case "gcra":
		limit = burst
		if rate > per {
			return "policy: gcra admits at most one unit per millisecond"
		}
		interval := (per + rate - 1) / rate
		if burst > (100*366*24*time.Hour).Milliseconds()/interval {
			return "policy: gcra's bucket takes too long to fill"
		}
	case "sliding_window":
		if rate > (1<<61)/per {
			return "policy: rate × per_ms is over 2^61"
		}
	}
	if get(b, "n", 1) > limit {
		return "n is over the policy's limit"
	}
	return ""
}

// response is what the server answered.
type response struct {
	status int
	header http.Header
	body   []byte
}

// send sends c to the live server.
func (o *oracle) send(t *testing.T, op *operation, c request) response {
	t.Helper()
	path := op.path
	for name, v := range c.path {
		path = strings.Replace(path, "{"+name+"}", url.PathEscape(fmt.Sprint(v)), 1)
	}
	q := url.Values{}
	for name, v := range c.query {
		q.Set(name, fmt.Sprint(v))
	}
	target := o.base + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var body io.Reader
	var raw []byte
	switch {
	case c.raw != nil:
		raw = []byte(*c.raw)
	case !c.noBody:
		var err error
		if raw, err = json.Marshal(c.body); err != nil {
			t.Fatal(err)
		}
	}
	if raw != nil {
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(strings.ToUpper(op.method), target, body)
	if err != nil {
		t.Fatal(err)
	}
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		if !strings.HasPrefix(k, "-") && !strings.HasPrefix(k, "webhook-") {
			req.Header.Set(k, v)
		}
	}
	if op.signed() {
		o.seq++
		id := "msg-" + strconv.Itoa(o.seq)
		if v, ok := c.header["webhook-id"]; ok {
			id = v
		}
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(conformanceSecret, "whsec_"))
		m := hmac.New(sha256.New, key)
		m.Write([]byte(id + "." + ts + "." + string(raw)))
		sig := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
		for h, v := range map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig} {
			if _, absent := c.header["-"+h]; !absent {
				req.Header.Set(h, v)
			}
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", op, c.name, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{res.StatusCode, res.Header, b}
}

// judge checks the answer to c, valid or not by the document.
func (o *oracle) judge(t *testing.T, op *operation, c request, valid bool, why string, res response) {
	t.Helper()
	o.statuses[res.status]++
	what := fmt.Sprintf("%s (%s) answered %d %s", op, c.name, res.status, truncate(res.body))
	if res.header.Get("X-Request-Id") == "" {
		t.Errorf("%s: without X-Request-Id", what)
	}
	code := strconv.Itoa(res.status)
	responses := op.op["responses"].(map[string]any)
	documented, _ := responses[code].(map[string]any)
	switch {
	case res.status >= 500:
		t.Errorf("%s: a server error", what)
	case valid && slices.Contains([]int{400, 413, 415, 422}, res.status):
		t.Errorf("%s: the document allows this request", what)
	case !valid && res.status != 400 && !(op.signed() && res.status == 401):
		t.Errorf("%s: the document refuses this request (%s)", what, why)
	case documented == nil:
		t.Errorf("%s: status %s is not documented for this operation", what, code)
	}
	if documented == nil {
		return
	}
	ptr := op.pointer + "/responses/" + code
	content, _ := documented["content"].(map[string]any)
	ct, _, _ := mime.ParseMediaType(res.header.Get("Content-Type"))
	if len(content) == 0 {
		if len(res.body) > 0 {
			t.Errorf("%s: a body where none is documented", what)
		}
		return
	}
	if _, ok := content[ct]; !ok {
		t.Errorf("%s: Content-Type %q is not documented (%v)", what, ct, sortedKeys(content))
		return
	}
	if !strings.HasSuffix(ct, "json") {
		return
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(res.body))
	if err != nil {
		t.Errorf("%s: the body is not JSON: %v", what, err)
		return
	}
	sptr := ptr + "/content/" + escape(ct) + "/schema"
	if err := o.schema(t, sptr).Validate(v); err != nil {
		t.Errorf("%s: the body does not match its schema: %v", what, err)
	}
	if extra := o.undocumented(content[ct].(map[string]any)["schema"], v, ""); extra != "" {
		t.Errorf("%s: member %s is not documented", what, extra)
	}
	if res.status >= 400 {
		problems, _ := documented["x-problems"].([]any)
		name := strings.TrimPrefix(fmt.Sprint(v.(map[string]any)["type"]), "urn:racefree:problem:")
		if !slices.Contains(problems, any(name)) {
			t.Errorf("%s: problem %q is not among those documented for %s (%v)", what, name, code, problems)
		}
		if !valid && res.status == 400 && name != "invalid-input" {
			t.Errorf("%s: an invalid request, answered %s rather than invalid-input", what, name)
		}
	}
}

// undocumented returns the first member of v that schema s does not
// describe, walking properties and items, or "".
func (o *oracle) undocumented(s any, v any, at string) string {
	m, _ := o.resolve(s)
	if m == nil {
		m, _ = s.(map[string]any)
	}
	switch x := v.(type) {
	case map[string]any:
		props, ok := m["properties"].(map[string]any)
		if !ok {
			return ""
		}
		for k, e := range x {
			ps, ok := props[k]
			if !ok {
				return at + "." + k
			}
			if bad := o.undocumented(ps, e, at+"."+k); bad != "" {
				return bad
			}
		}
	case []any:
		for i, e := range x {
			if bad := o.undocumented(m["items"], e, at+"["+strconv.Itoa(i)+"]"); bad != "" {
				return bad
			}
		}
	}
	return ""
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// ---- x-max-bytes, for the validator ----

func maxBytesVocabulary(t *testing.T) *jsonschema.Vocabulary {
	t.Helper()
	const url = "urn:racefree:vocab:max-bytes"
	meta, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"properties":{"x-max-bytes":{"type":"integer","minimum":0}}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, meta); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return &jsonschema.Vocabulary{URL: url, Schema: sch, Compile: func(_ *jsonschema.CompilerContext, obj map[string]any) (jsonschema.SchemaExt, error) {
		n, ok := num(obj[maxBytes])
		if !ok {
			return nil, nil
		}
		return byteLimit(n), nil
	}}
}

// byteLimit bounds a string in bytes of UTF-8.
type byteLimit int64

func (b byteLimit) Validate(ctx *jsonschema.ValidatorContext, v any) {
	if s, ok := v.(string); ok && int64(len(s)) > int64(b) {
		ctx.AddError(&tooManyBytes{got: len(s), want: int64(b)})
	}
}

type tooManyBytes struct {
	got  int
	want int64
}

func (*tooManyBytes) KeywordPath() []string { return []string{maxBytes} }

func (e *tooManyBytes) LocalizedString(p *message.Printer) string {
	return p.Sprintf("x-max-bytes: got %d bytes, want at most %d", e.got, e.want)
}

// methodsNotServed sends each path a method it does not document and
// wants 405 method-not-allowed, with Allow naming the documented ones.
func (o *oracle) methodsNotServed(t *testing.T) {
	t.Helper()
	for path, item := range o.doc["paths"].(map[string]any) {
		var documented []string
		for m := range item.(map[string]any) {
			documented = append(documented, strings.ToUpper(m))
		}
		target := path
		for _, name := range []string{"key", "fingerprint", "source", "scope", "name", "id"} {
			target = strings.Replace(target, "{"+name+"}", "1", 1)
		}
		req, _ := http.NewRequest(http.MethodPatch, o.base+target, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		allow := strings.Split(strings.ReplaceAll(res.Header.Get("Allow"), " ", ""), ",")
		if res.StatusCode != 405 || !bytes.Contains(b, []byte("urn:racefree:problem:method-not-allowed")) {
			t.Errorf("PATCH %s answered %d %s, want 405 method-not-allowed", path, res.StatusCode, truncate(b))
		}
		for _, m := range documented {
			if !slices.Contains(allow, m) {
				t.Errorf("PATCH %s: Allow %q lacks the documented %s", path, res.Header.Get("Allow"), m)
			}
		}
	}
}
