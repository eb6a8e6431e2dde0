package server

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/racefree/racefree/internal/problem"
)

// The OpenAPI 3.1 document served at GET /openapi.json is built from the
// tables below: apiRoutes describes every route the server registers
// (TestOpenAPIDescribesEveryRouteAndProblem walks the router and the
// document both ways), outsideAPI lists the routes deliberately left out
// of it, and problemDocs says when each problem kind is answered.

// outsideAPI are routes served but not described in /openapi.json: they
// are not part of the JSON API (the Prometheus text format; pages for
// people). Add a route here, or to apiRoutes, when you register it.
var outsideAPI = append([]string{
	"GET /metrics",
}, DashboardRoutes...)

// param is a query parameter.
type param struct {
	name, schema, description string
	required                  bool
}

// apiRoute describes one route: what it does, its body, its answer and
// the problems it may answer with besides the ones every route of its
// kind shares (see problemsOf).
type apiRoute struct {
	summary  string
	request  map[string]any // JSON Schema of the body; nil: none
	response map[string]any // JSON Schema of the 200 body; nil: 204 (or 200 text)
	query    []param
	problems []problem.Kind
	// headers are components.headers its 200 answer carries besides
	// X-Request-Id and Idempotent-Replayed.
	headers []string
	// idempotent: takes an Idempotency-Key and replays (transactional).
	idempotent bool
	// anonymous: no credential (health, the document itself); signed: a
	// webhook signature instead of a credential.
	anonymous, signed bool
}

// JSON Schema helpers.
func obj(required []string, props map[string]any) map[string]any {
	o := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	return o
}

func typ(t, description string) map[string]any {
	m := map[string]any{"type": t}
	if description != "" {
		m["description"] = description
	}
	return m
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

var (
	str     = typ("string", "")
	integer = typ("integer", "")
	boolean = typ("boolean", "")
	anyJSON = map[string]any{"description": "any JSON value"}
	when    = map[string]any{"type": "string", "format": "date-time", "description": "RFC 3339, UTC, milliseconds"}
)

// schemas are the shared JSON Schemas, in components.schemas.
var schemas = map[string]any{
	"Claim": obj([]string{"key", "holder", "fence", "live"}, map[string]any{
		"key": str, "holder": typ("string", "the holder of the current (or last) tenure"),
		"fence":      typ("integer", "grows by one with each new tenure, kept by renewals"),
		"claimed_at": when, "expires_at": when, "live": typ("boolean", "live when read"),
		"count": typ("integer", "acquire attempts, won and lost"), "first_seen": when, "last_seen": when,
	}),
	"Problem": obj([]string{"type", "title", "status"}, map[string]any{
		"type":           map[string]any{"type": "string", "description": "urn:racefree:problem:<name>; see x-problems"},
		"title":          str,
		"status":         integer,
		"detail":         str,
		"request_id":     typ("string", "the request's X-Request-Id"),
		"holder":         typ("string", "held: the live claim's holder"),
		"fence":          typ("integer", "held: the live claim's fence; stale-fence: the caller's"),
		"expires_at":     when,
		"current_fence":  typ("integer", "stale-fence: the claim's fence"),
		"retry_after_ms": typ("integer", "quota-exceeded: exactly when the same charge would be allowed"),
		"remaining":      typ("integer", "quota-exceeded: the units the key could be charged now"),
		"reset_at":       map[string]any{"type": "string", "format": "date-time", "description": "quota-exceeded: when the key is back to its full limit (RFC 3339, UTC, milliseconds)"},
	}),
	"AuditEntry": obj([]string{"scope", "seq"}, map[string]any{
		"scope": str, "seq": integer, "at": when, "actor": str, "action": str, "subject": str,
		"data": anyJSON, "data_base64": str, "key_id": str, "prev_mac": str, "mac": str,
	}),
	"Checkpoint": typ("object", "a signed checkpoint of a scope's head (package audit)"),
	"AuditVerification": obj([]string{"intact"}, map[string]any{
		"intact": boolean, "tenant": str, "scope": str, "rows": integer,
		"verified": typ("object", "the last entry verified intact"), "break": typ("object", "the first break, when broken"),
		"anchored":      typ("boolean", "a checkpoint vouched for the chain up to its entry"),
		"possible_loss": typ("array", "the racefree.audit.timeline_changed entries checked ({seq, from_timeline, to_timeline, last_seq}): the chain moved to another PostgreSQL timeline (a failover) there, and entries acknowledged on the old one after last_seq may have been lost; the chain is still intact"),
		"warnings":      typ("array", "one line for each of possible_loss"),
	}),
}

var ttlMs = typ("integer", "milliseconds, 1 to 2592000000")

// apiRoutes describes every route of the API, by its pattern.
var apiRoutes = map[string]apiRoute{
	"GET /healthz": {summary: "Answers 200 while the process is up", anonymous: true,
		response: obj(nil, map[string]any{"status": str})},
	"GET /readyz": {summary: "Answers 200 while the database answers, accepts writes and its schema is current", anonymous: true,
		response: obj(nil, map[string]any{"status": str, "engine": str,
			"warnings": map[string]any{"type": "array", "description": "PostgreSQL: present when the database role racefree serves as escapes row-level security (itself or through a role it can become); still ready",
				"items": obj([]string{"code", "detail"}, map[string]any{"code": typ("string", "role-is-superuser, role-bypasses-rls, role-owns-tables or role-not-judged"), "detail": str})},
			"doctor": map[string]any{"type": "array", "description": "present once serve ran racefree doctor's checks (at start): each finding's stable code (README, racefree doctor) and severity (info, warn or error); empty when it found nothing; still ready",
				"items": obj([]string{"code", "severity"}, map[string]any{"code": str, "severity": typ("string", "info, warn or error")})}}),
		problems: []problem.Kind{problem.NotReady, problem.ReadOnly}},
	"GET /openapi.json": {summary: "This document", anonymous: true, response: typ("object", "OpenAPI 3.1")},

	"POST /v1/claims/{key}": {summary: "Acquire the claim on key: exactly one holder wins; the holder's own live claim is won again with its fence",
		idempotent: true, request: obj([]string{"holder", "ttl_ms"}, map[string]any{"holder": str, "ttl_ms": ttlMs}),
		response: ref("Claim"), problems: []problem.Kind{problem.Held}},
	"POST /v1/claims/{key}/renew": {summary: "Extend the live claim of (holder, fence); the fence is kept",
		idempotent: true, request: obj([]string{"holder", "fence", "ttl_ms"}, map[string]any{"holder": str, "fence": integer, "ttl_ms": ttlMs}),
		response: ref("Claim"), problems: []problem.Kind{problem.StaleFence, problem.NotHeld}},
	"DELETE /v1/claims/{key}": {summary: "Release the tenure of (holder, fence) now; retrying a release succeeds",
		query:    []param{{"holder", "string", "the holder", true}, {"fence", "integer", "the tenure's fence", true}},
		problems: []problem.Kind{problem.InvalidInput, problem.StaleFence, problem.NotHeld}},
	"GET /v1/claims/{key}": {summary: "Read the claim on key", response: ref("Claim"),
		problems: []problem.Kind{problem.InvalidInput, problem.NotFound}},
	"POST /v1/events": {summary: "Observe an event: process it only when process is true (one fence per window)",
		idempotent: true, request: obj(nil, map[string]any{"source": str, "level": str, "message": str, "fingerprint": str, "window_ms": ttlMs}),
		response: obj(nil, map[string]any{"fingerprint": str, "process": boolean, "fence": integer, "count": integer, "first_seen": when, "last_seen": when})},
	"POST /v1/events/{fingerprint}/result": {summary: "Record the result of processing an event, under its fence",
		idempotent: true, request: obj([]string{"fence"}, map[string]any{"fence": integer, "classification": str, "external_id": str}),
		response: obj(nil, map[string]any{"fingerprint": str, "fence": integer, "classification": str, "external_id": str}),
		problems: []problem.Kind{problem.StaleFence, problem.NotHeld, problem.NotFound}},

	"POST /v1/inbox/{source}": {summary: "Receive a Standard Webhooks delivery, at most once per event id", signed: true,
		request: anyJSON, response: obj(nil, map[string]any{"status": str}),
		problems: []problem.Kind{problem.InvalidInput, problem.UnknownSource, problem.BadSignature, problem.TooLarge}},
	"GET /v1/inbox/{source}": {summary: "List the source's received deliveries, oldest first",
		query:    []param{{"after", "integer", "the cursor returned as next", false}, {"limit", "integer", "at most this many", false}},
		response: obj(nil, map[string]any{"events": typ("array", ""), "next": str}),
		problems: []problem.Kind{problem.InvalidInput, problem.UnknownSource}},

	"POST /v1/sequences/{scope}/{name}/next": {summary: "Hand out n gapless numbers of the counter; a retry gets the same numbers",
		idempotent: true, request: obj(nil, map[string]any{"n": integer}),
		response: obj(nil, map[string]any{"scope": str, "name": str, "first": integer, "last": integer}),
		problems: []problem.Kind{problem.SequenceExhausted}},

	"POST /v1/tokens": {summary: "Issue a one-time code or a refresh token (never stored, so no Idempotency-Key)",
		request:  obj([]string{"kind", "purpose", "subject", "ttl_ms"}, map[string]any{"kind": str, "purpose": str, "subject": str, "ttl_ms": ttlMs}),
		response: typ("object", "the token, in clear, once"), problems: []problem.Kind{problem.InvalidInput, problem.TooLarge}},
	"POST /v1/tokens/consume": {summary: "Consume a one-time code: exactly once", idempotent: true,
		request: obj([]string{"purpose", "token"}, map[string]any{"purpose": str, "token": str}), response: typ("object", "the code's subject"),
		problems: []problem.Kind{problem.TokenUnknown, problem.TokenUsed, problem.TokenExpired}},
	"POST /v1/tokens/rotate": {summary: "Rotate a refresh token; reuse revokes its family (no Idempotency-Key: retry within the grace window)",
		request: obj([]string{"token"}, map[string]any{"token": str}), response: typ("object", "the successor, in clear"),
		problems: []problem.Kind{problem.InvalidInput, problem.TooLarge, problem.TokenUnknown, problem.TokenReused, problem.TokenRevoked, problem.TokenExpired}},

	"POST /v1/audit": {summary: "Append an entry to a scope's tamper-evident chain", idempotent: true,
		request:  obj([]string{"scope", "actor", "action"}, map[string]any{"scope": str, "actor": str, "action": str, "subject": str, "data": anyJSON}),
		response: ref("AuditEntry"), problems: []problem.Kind{problem.AuditUnconfigured, problem.AuditKeyMissing}},
	"GET /v1/audit": {summary: "List a scope's entries in order", response: obj(nil, map[string]any{"entries": map[string]any{"type": "array", "items": ref("AuditEntry")}, "next": str}),
		query:    []param{{"scope", "string", "the scope", false}, {"after", "integer", "the cursor returned as next", false}, {"limit", "integer", "at most this many", false}},
		problems: []problem.Kind{problem.InvalidInput, problem.AuditUnconfigured}},
	"GET /v1/audit/verify": {summary: "Verify a scope's chain against the stored checkpoints; a broken chain is 200 with intact false",
		query: []param{{"scope", "string", "the scope", false}}, response: ref("AuditVerification"),
		problems: []problem.Kind{problem.InvalidInput, problem.AuditUnconfigured, problem.AuditKeyMissing}},
	"POST /v1/audit/checkpoints": {summary: "Sign a checkpoint of a scope's head (admin scope)", idempotent: true,
		request: obj(nil, map[string]any{"scope": str}), response: ref("Checkpoint"),
		problems: []problem.Kind{problem.AuditUnconfigured, problem.AuditKeyMissing}},
	"GET /v1/audit/checkpoints/latest": {summary: "The scope's latest checkpoint", query: []param{{"scope", "string", "the scope", false}},
		response: ref("Checkpoint"), problems: []problem.Kind{problem.InvalidInput, problem.AuditUnconfigured, problem.NotFound}},

	"POST /v1/quotas/{key}/consume": {summary: "Charge n units of key under a policy: never more than the limit; a denial charges nothing",
		idempotent: true, request: obj([]string{"policy"}, map[string]any{"n": integer, "policy": obj([]string{"kind", "rate", "per_ms"},
			map[string]any{"kind": typ("string", "gcra, window or sliding_window"), "rate": integer, "per_ms": integer, "burst": typ("integer", "gcra's bucket")})}),
		response: obj(nil, map[string]any{"allowed": boolean, "remaining": integer, "reset_at": when}),
		problems: []problem.Kind{problem.QuotaExceeded}, headers: rateLimitHeaders},

	"POST /v1/outbox": {summary: "Enqueue a message, delivered after commit until a permanent failure", idempotent: true,
		request: obj([]string{"topic"}, map[string]any{"topic": str, "key": str, "payload": anyJSON, "payload_base64": str,
			"headers": typ("object", "request headers of the HTTP delivery; a name starting with Racefree- (any case) is refused (400)"), "delay_ms": integer, "not_before": when, "max_attempts": integer, "ordered": boolean}),
		response: typ("object", "the message's id and state"), problems: []problem.Kind{problem.UnsupportedMediaType}},
	"GET /v1/outbox/dead": {summary: "List dead letters",
		query:    []param{{"topic", "string", "only this topic", false}, {"after", "integer", "the cursor returned as next", false}, {"limit", "integer", "at most this many", false}},
		response: typ("object", "messages and next"), problems: []problem.Kind{problem.InvalidInput}},
	"GET /v1/outbox/stats": {summary: "Backlog figures: pending, dead, delivered", response: typ("object", "counts by state")},
	"POST /v1/outbox/dead/{id}/redrive": {summary: "Send a dead letter again (admin scope)", idempotent: true,
		response: typ("object", "the message"), problems: []problem.Kind{problem.NotFound}},
	"POST /v1/outbox/dead/{id}/discard": {summary: "Discard a dead letter (admin scope)", idempotent: true,
		response: typ("object", "the message"), problems: []problem.Kind{problem.NotFound}},
}

// rateLimitHeaders are the headers of a quota decision, admitted (200) or
// refused (429 quota-exceeded).
var rateLimitHeaders = []string{"RateLimit-Policy", "RateLimit"}

// problemDocs says when each problem kind is answered, by its name.
var problemDocs = map[string]string{
	"invalid-input":             "the request is malformed or a value is out of range; nothing was changed",
	"idempotency-key-missing":   "idempotency.Middleware (the library) on a route that requires an Idempotency-Key; racefree serve never requires one",
	"idempotency-key-malformed": "the Idempotency-Key is not a Structured Field string of 1 to 255 characters, or appears twice",
	"unauthorized":              "a /v1/ route without a valid credential (with --token or --require-key), or with a malformed, unknown or revoked one",
	"bad-signature":             "a webhook delivery whose Standard Webhooks signature does not verify",
	"insufficient-scope":        "the API key lacks the route's scope (read for GET, write otherwise, admin for operator routes)",
	"not-found":                 "the claim, event, checkpoint or dead letter does not exist",
	"no-route":                  "no route has this path",
	"unknown-source":            "no inbox secret is configured for this source (of this tenant)",
	"method-not-allowed":        "the path exists, not with this method (Allow lists the methods)",
	"held":                      "another holder's claim is live; holder, fence and expires_at name it",
	"not-held":                  "the claim is not the caller's: it lapsed, was released, or the fence was never issued",
	"stale-fence":               "another tenure began since the caller's: fence and current_fence",
	"idempotency-in-progress":   "the first request with this Idempotency-Key is still running; retry after Retry-After",
	"sequence-exhausted":        "the counter reached its maximum",
	"too-large":                 "the request body is over the limit",
	"unsupported-media-type":    "the body is not JSON",
	"idempotency-key-mismatch":  "the Idempotency-Key was used with another request",
	"quota-exceeded":            "the charge was refused and charged nothing; retry after Retry-After (retry_after_ms exactly)",
	"internal":                  "an unexpected failure, logged with the request id",
	"unavailable":               "the database is unavailable or busy, or the request timed out waiting for it; retry after Retry-After (a POST with the same Idempotency-Key)",
	"idempotency-unavailable":   "idempotency.Middleware (the library) could not reach its store; racefree serve answers unavailable instead",
	"read-only":                 "the database node reached accepts no writes (a standby, or read-only transactions): the write wrote nothing; retry after Retry-After with the same Idempotency-Key. readyz answers it too, on such a node",
	"schema":                    "the database schema does not match this server",
	"not-ready":                 "readyz: the database does not answer or its schema is not current",
	"token-unknown":             "no such token",
	"token-used":                "the one-time code was consumed already",
	"token-reused":              "a rotated refresh token was used again: its family is revoked",
	"token-revoked":             "the refresh token's family was revoked",
	"token-expired":             "the token expired",
	"audit-unconfigured":        "the server has no audit keyring",
	"audit-key-missing":         "an entry or checkpoint names a key the keyring lacks",
}

// problemsOf returns every problem kind route p may answer: its own, those
// of every /v1/ route (credentials, outages), those of an idempotent route
// (the Idempotency-Key's), of a route with a JSON body, and
// method-not-allowed.
func problemsOf(pattern string, r apiRoute) []problem.Kind {
	kinds := append([]problem.Kind{problem.MethodNotAllowed}, r.problems...)
	if strings.Contains(pattern, " /v1/") {
		kinds = append(kinds, problem.Internal, problem.Unavailable, problem.ReadOnly, problem.Schema)
		if !r.signed {
			kinds = append(kinds, problem.Unauthorized, problem.InsufficientScope)
		}
	}
	if r.idempotent {
		kinds = append(kinds, problem.InvalidInput, problem.TooLarge, problem.IdempotencyMalformed, problem.InProgress, problem.KeyMismatch)
	}
	seen := map[string]bool{}
	out := kinds[:0]
	for _, k := range kinds {
		if !seen[k.Name] {
			seen[k.Name] = true
			out = append(out, k)
		}
	}
	return out
}

// problemResponse is the OpenAPI response of the problems of one status.
func problemResponse(kinds []problem.Kind) map[string]any {
	var names []string
	headers := map[string]any{"X-Request-Id": headerRef("X-Request-Id")}
	for _, k := range kinds {
		names = append(names, k.Name)
		switch k.Name {
		case "quota-exceeded":
			for _, h := range append([]string{"Retry-After"}, rateLimitHeaders...) {
				headers[h] = headerRef(h)
			}
		case "unavailable", "read-only", "idempotency-in-progress", "schema", "not-ready":
			headers["Retry-After"] = headerRef("Retry-After")
		case "unauthorized", "insufficient-scope":
			headers["WWW-Authenticate"] = map[string]any{"schema": str}
		case "method-not-allowed":
			headers["Allow"] = map[string]any{"schema": str}
		}
	}
	return map[string]any{
		"description": "urn:racefree:problem:" + strings.Join(names, ", urn:racefree:problem:"),
		"headers":     headers,
		"x-problems":  names,
		"content":     map[string]any{"application/problem+json": map[string]any{"schema": ref("Problem")}},
	}
}

// OpenAPI returns the OpenAPI 3.1 document of the API, as served at GET
// /openapi.json.
func OpenAPI() map[string]any {
	paths := map[string]any{}
	for pattern, r := range apiRoutes {
		method, path, _ := strings.Cut(pattern, " ")
		op := map[string]any{"summary": r.summary, "operationId": operationID(pattern)}
		var params []any
		for _, name := range pathParams(path) {
			params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": str})
		}
		for _, q := range r.query {
			params = append(params, map[string]any{"name": q.name, "in": "query", "required": q.required, "description": q.description,
				"schema": map[string]any{"type": q.schema}})
		}
		if r.idempotent {
			params = append(params, map[string]any{"$ref": "#/components/parameters/Idempotency-Key"})
		}
		params = append(params, map[string]any{"$ref": "#/components/parameters/X-Request-Id"})
		op["parameters"] = params
		if r.request != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": r.request}}}
		}
		ok := map[string]any{"headers": map[string]any{"X-Request-Id": headerRef("X-Request-Id")}}
		status := "200"
		if r.response == nil {
			status, ok["description"] = "204", "done"
		} else {
			ok["description"] = "OK"
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": r.response}}
		}
		if r.idempotent {
			ok["headers"].(map[string]any)["Idempotent-Replayed"] = headerRef("Idempotent-Replayed")
		}
		for _, h := range r.headers {
			ok["headers"].(map[string]any)[h] = headerRef(h)
		}
		responses := map[string]any{status: ok}
		byStatus := map[int][]problem.Kind{}
		for _, k := range problemsOf(pattern, r) {
			byStatus[k.Status] = append(byStatus[k.Status], k)
		}
		for code, kinds := range byStatus {
			responses[strconv.Itoa(code)] = problemResponse(kinds)
		}
		op["responses"] = responses
		if r.anonymous || r.signed {
			op["security"] = []any{}
		}
		item, _ := paths[path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[path] = item
		}
		item[strings.ToLower(method)] = op
	}
	var kinds []any
	for _, k := range problem.Kinds() {
		kinds = append(kinds, map[string]any{"type": k.Type(), "title": k.Title, "status": k.Status, "when": problemDocs[k.Name]})
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "racefree", "version": "1",
			"description": "Concurrency and retry primitives with the database as the referee. Errors are RFC 9457 problem documents; x-problems lists every type."},
		"paths":      paths,
		"security":   []any{map[string]any{"bearer": []any{}}},
		"x-problems": kinds,
		"components": map[string]any{
			"schemas":         schemas,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "description": "an API key (racefree keys create) or serve --token"}},
			"parameters": map[string]any{
				"Idempotency-Key": map[string]any{"name": "Idempotency-Key", "in": "header", "required": false, "schema": str,
					"description": `a Structured Field string, e.g. "8e03978e40d5": the first answer is stored and replayed to every retry with the same key and request`},
				"X-Request-Id": map[string]any{"name": "X-Request-Id", "in": "header", "required": false, "schema": str,
					"description": "1 to 128 visible ASCII characters, kept as the request's id; one is made up otherwise"},
			},
			"headers": map[string]any{
				"X-Request-Id":        map[string]any{"schema": str, "description": "the request's id, also in problem bodies (request_id) and the access log"},
				"Idempotent-Replayed": map[string]any{"schema": str, "description": "true: the stored answer of an earlier request with the same Idempotency-Key"},
				"Retry-After":         map[string]any{"schema": integer, "description": "seconds to wait before retrying"},
				"RateLimit-Policy":    map[string]any{"schema": str, "description": `draft-ietf-httpapi-ratelimit-headers: "default";q=<limit>;w=<seconds an empty key takes to be full again>`},
				"RateLimit": map[string]any{"schema": str, "description": `draft-ietf-httpapi-ratelimit-headers: "default";r=<units remaining>;t=<seconds until full>, ` +
					"as of the decision (a replay carries the first answer's)"},
			},
		},
	}
}

// headerRef refers to the response header name of components.headers.
func headerRef(name string) map[string]any {
	return map[string]any{"$ref": "#/components/headers/" + name}
}

// pathParams returns the {names} of an OpenAPI (or ServeMux) path.
func pathParams(path string) []string {
	var out []string
	for _, seg := range strings.Split(path, "/") {
		if strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}") {
			out = append(out, strings.TrimSuffix(strings.Trim(seg, "{}"), "..."))
		}
	}
	return out
}

// operationID names an operation after its pattern: POST /v1/claims/{key}
// is post_v1_claims_key.
func operationID(pattern string) string {
	r := strings.NewReplacer(" ", "_", "/", "_", "{", "", "}", "", ".", "_", "-", "_")
	return strings.ToLower(strings.Trim(r.Replace(strings.Replace(pattern, " /", " ", 1)), "_"))
}

func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, OpenAPI())
}
