package server

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/racefree/racefree/audit"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
	"github.com/racefree/racefree/inbox"
	"github.com/racefree/racefree/internal/problem"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/outbox"
	"github.com/racefree/racefree/quota"
	"github.com/racefree/racefree/seq"
)

// The OpenAPI 3.1 document served at GET /openapi.json is built from the
// tables below: apiRoutes describes every route the server registers
// (TestOpenAPIDescribesEveryRouteAndProblem walks the router and the
// document both ways), outsideAPI lists the routes deliberately left out
// of it, and problemDocs says when each problem kind is answered. The
// schemas come from the definitions the handlers validate with (see
// apischema.go), and TestOpenAPIAgreesWithTheServer sends every operation
// requests the document allows and requests it refuses, on both engines.

// outsideAPI are routes served but not described in /openapi.json: the
// dashboard's pages and forms, HTML for people behind a session cookie
// and a CSRF token, not the JSON API (docs/dashboard.md describes them).
// Add a route here, or to apiRoutes, when you register it.
var outsideAPI = DashboardRoutes

// param is a query or header parameter.
type param struct {
	name     string
	schema   map[string]any
	required bool
}

// apiRoute describes one route: what it does, its body, its answer and
// the problems it may answer with besides the ones every route of its
// kind shares (see problemsOf).
type apiRoute struct {
	summary string
	// path are the schemas of the path parameters, by name.
	path     map[string]any
	request  map[string]any // JSON Schema of the body; nil: none
	response map[string]any // JSON Schema of the 200 body; nil: 204 (or text, see textResponse)
	// textResponse is the media type of a 200 body that is not JSON.
	textResponse string
	// optionalBody: the body may be left out (empty).
	optionalBody bool
	query        []param
	// requestHeaders are header parameters besides Idempotency-Key and
	// X-Request-Id.
	requestHeaders []param
	problems       []problem.Kind
	// headers are components.headers its 200 answer carries besides
	// X-Request-Id and Idempotent-Replayed.
	headers []string
	// idempotent: takes an Idempotency-Key and replays (transactional).
	idempotent bool
	// anonymous: no credential (health, the document itself); signed: a
	// webhook signature instead of a credential; metrics: the metrics
	// token, when serve has one.
	anonymous, signed, metrics bool
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

func arrayOf(items map[string]any, description string) map[string]any {
	a := map[string]any{"type": "array", "items": items}
	if description != "" {
		a["description"] = description
	}
	return a
}

var (
	str     = typ("string", "")
	integer = typ("integer", "")
	boolean = typ("boolean", "")
	when    = map[string]any{"type": "string", "description": "RFC 3339, UTC, milliseconds (empty when there is none)"}
	base64s = map[string]any{"type": "string", "contentEncoding": "base64", "description": "standard base64"}
	cursor  = map[string]any{"type": "string", "pattern": "^[0-9]+$", "description": "pass as after for the next page: the cursor of the page's last item; unchanged when there was nothing more. A page holds at most limit items and at most " + strconv.Itoa(MaxPageBytes>>20) + " MiB of JSON (its first item always, however large), so a short page is not the end: follow next until a page comes back empty"}
)

// Request parameters and fields, with the limits the handlers and the
// libraries check.
var (
	claimKeyParam = pathTextSchema(claim.MaxKeyBytes, "the claim's key")
	holder        = textSchema(claim.MaxHolderBytes, "who holds the claim")
	claimTTL      = intSchema(claim.MinTTL.Milliseconds(), claim.MaxTTL.Milliseconds(), "the claim's time to live, in milliseconds")
	fence         = positive("the tenure's fence")
	afterParam    = param{"after", withDefault(intSchema(0, math.MaxInt64, "the cursor returned as next"), 0), false}
	auditScope    = textSchema(audit.MaxScopeLen, "the audit scope")
)

// limitParam is a page's limit, 1 to max, 100 when left out; a page also
// stops at MaxPageBytes of JSON.
func limitParam(max int) param {
	return param{"limit", withDefault(intSchema(1, int64(max), "at most this many; a page also stops before the item that would take its JSON past "+strconv.Itoa(MaxPageBytes>>20)+" MiB"), 100), false}
}

// policySchema is a quota policy. The cross-field limits [quota.Policy]
// checks besides these are in its description.
var policySchema = func() map[string]any {
	s := bodySchema(policyRequest{}, []string{"kind", "rate", "per_ms"}, map[string]any{
		"kind": map[string]any{"type": "string", "enum": []string{string(quota.GCRA), string(quota.FixedWindow), string(quota.SlidingWindow)},
			"description": "gcra (a token bucket), window (fixed windows) or sliding_window"},
		"rate":   intSchema(1, quota.MaxUnits, "units admitted per per_ms"),
		"per_ms": intSchema(1, quota.MaxPer.Milliseconds(), "the period, in milliseconds"),
		"burst":  intSchema(math.MinInt64, math.MaxInt64, "gcra: the bucket's size, required, 1 to 1000000000; ignored by the other kinds"),
	})
	s["description"] = "gcra: rate at most per_ms (one unit per millisecond), and burst × ceil(per_ms / rate) at most " +
		strconv.FormatInt(quota.MaxRefill.Milliseconds(), 10) + "; sliding_window: rate × per_ms at most 2^61"
	s["if"] = map[string]any{"properties": map[string]any{"kind": map[string]any{"const": string(quota.GCRA)}}}
	s["then"] = map[string]any{"required": []string{"burst"}, "properties": map[string]any{"burst": intSchema(1, quota.MaxUnits, "")}}
	return s
}()

// issueSchema is the body of POST /v1/tokens: a code needs a purpose, a
// refresh token has none.
var issueSchema = func() map[string]any {
	s := bodySchema(issueRequest{}, []string{"subject", "ttl_ms"}, map[string]any{
		"kind":    withDefault(map[string]any{"type": "string", "enum": []string{"code", "refresh"}, "description": "a one-time code, or a refresh token"}, "code"),
		"purpose": optionalTextSchema(onetime.MaxPurposeBytes, "a code: what it is for, required (1 to 128 bytes); a refresh token: none (absent or empty)"),
		"subject": textSchema(onetime.MaxSubjectBytes, "whom the token is for"),
		"ttl_ms":  intSchema(onetime.MinTTL.Milliseconds(), onetime.MaxTTL.Milliseconds(), "the token's time to live, in milliseconds"),
	})
	s["if"] = map[string]any{"required": []string{"kind"}, "properties": map[string]any{"kind": map[string]any{"const": "refresh"}}}
	s["then"] = map[string]any{"properties": map[string]any{"purpose": map[string]any{"maxLength": 0}}}
	s["else"] = map[string]any{"required": []string{"purpose"}, "properties": map[string]any{"purpose": map[string]any{"minLength": 1}}}
	return s
}()

// enqueueSchema is the body of POST /v1/outbox.
var enqueueSchema = func() map[string]any {
	s := bodySchema(enqueueRequest{}, []string{"topic"}, map[string]any{
		"topic":          textSchema(outbox.MaxTopicBytes, "the topic, which routes the message to its handler"),
		"key":            optionalTextSchema(outbox.MaxKeyBytes, "the ordering key; required for an ordered message"),
		"payload":        map[string]any{"description": "any JSON value, delivered as sent (at most 1 MiB); or payload_base64, not both"},
		"payload_base64": map[string]any{"type": "string", "contentEncoding": "base64", "pattern": base64Pattern, "description": "a payload of any bytes, in standard base64 (at most 1 MiB decoded)"},
		"headers": map[string]any{"type": "object", "maxProperties": outbox.MaxHeaders,
			"description": "request headers of the HTTP delivery, at most " + strconv.Itoa(outbox.MaxHeaderBytes) + " bytes of names and values in all",
			"propertyNames": map[string]any{"pattern": "^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$",
				"not": map[string]any{"pattern": "^[Rr][Aa][Cc][Ee][Ff][Rr][Ee][Ee]-", "description": "names starting with Racefree- (any case) are racefree's own"}},
			"additionalProperties": map[string]any{"type": "string", "pattern": `^[^\r\n\x00]*$`}},
		"delay_ms":     intSchema(0, outbox.MaxDelay.Milliseconds(), "deliver no sooner than this many milliseconds from now; or not_before, not both"),
		"not_before":   map[string]any{"type": "string", "format": "date-time", "pattern": dateTimePattern, "description": "deliver no sooner than this RFC 3339 time, at most 366 days ahead; or delay_ms, not both"},
		"max_attempts": withDefault(intSchema(0, outbox.MaxAttemptsLimit, "attempts before the message is dead; 0 is the server's default"), 0),
		"ordered":      withDefault(map[string]any{"type": "boolean", "description": "deliver in order with the other ordered messages of its key (needs key)"}, false),
	})
	s["allOf"] = []any{
		map[string]any{"not": map[string]any{"required": []string{"payload", "payload_base64"}}},
		map[string]any{"not": map[string]any{"required": []string{"delay_ms", "not_before"}}},
		map[string]any{"if": map[string]any{"required": []string{"ordered"}, "properties": map[string]any{"ordered": map[string]any{"const": true}}},
			"then": map[string]any{"required": []string{"key"}, "properties": map[string]any{"key": map[string]any{"minLength": 1}}}},
	}
	return s
}()

var tokenString = textSchema(onetime.MaxTokenBytes, "the token, as issued")

// refreshToken is a refresh token as issued or rotated.
var refreshToken = obj([]string{"kind", "outcome", "token", "subject", "expires_at", "generation"}, map[string]any{
	"kind": map[string]any{"const": "refresh"}, "outcome": typ("string", "issued, rotated or replayed (a retry within the grace window)"),
	"token": str, "subject": str, "expires_at": when, "generation": integer,
})

// schemas are the shared JSON Schemas, in components.schemas.
var schemas = map[string]any{
	"Claim": obj([]string{"key", "holder", "fence", "claimed_at", "expires_at", "live", "count", "first_seen", "last_seen"}, map[string]any{
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
		"remaining":      intSchema(0, math.MaxInt64, "quota-exceeded: the units the key could be charged now"),
		"reset_at":       typ("string", "quota-exceeded: when the key is back to its full limit (RFC 3339, UTC, milliseconds)"),
		"outcome":        typ("string", "a token's refusal: already_used, reused, revoked, expired or unknown"),
		"reason":         typ("string", "read-only on readyz: why the node accepts no writes"),
	}),
	"AuditEntry": obj([]string{"scope", "seq", "at", "actor", "action", "subject", "key_id", "prev_mac", "mac"}, map[string]any{
		"scope": str, "seq": integer, "at": when, "actor": str, "action": str, "subject": str,
		"data": described("the JSON the entry was appended with, when it is JSON"), "data_base64": base64s, "key_id": str, "prev_mac": base64s, "mac": base64s,
	}),
	"Checkpoint": obj([]string{"scope", "n", "seq", "mac", "at", "prev", "key_id", "sig"}, map[string]any{
		"tenant": str, "scope": str, "n": integer, "seq": integer, "mac": base64s, "at": typ("string", "RFC 3339"),
		"prev": base64s, "key_id": typ("string", "the Ed25519 key that signed it"), "sig": base64s,
	}),
	"AuditVerification": obj([]string{"intact", "tenant", "scope", "rows", "verified", "anchored"}, map[string]any{
		"intact": boolean, "tenant": str, "scope": str, "rows": integer,
		"verified": obj([]string{"seq", "mac", "key_id"}, map[string]any{"seq": integer, "mac": base64s, "key_id": str}),
		"break":    obj([]string{"kind", "seq", "detail"}, map[string]any{"kind": str, "seq": integer, "detail": str}),
		"anchored": typ("boolean", "a checkpoint vouched for the chain up to its entry"),
		"possible_loss": arrayOf(obj([]string{"seq", "from_timeline", "to_timeline", "last_seq"}, map[string]any{
			"seq": integer, "from_timeline": integer, "to_timeline": integer, "last_seq": integer}),
			"the racefree.audit.timeline_changed entries checked: the chain moved to another PostgreSQL timeline (a failover) there, and entries acknowledged on the old one after last_seq may have been lost; the chain is still intact"),
		"warnings": arrayOf(str, "one line for each of possible_loss"),
	}),
	"DeadMessage": obj([]string{"id", "topic", "key", "ordered", "headers", "attempts", "max_attempts", "created_at", "died_at", "last_error"}, map[string]any{
		"id": integer, "topic": str, "key": str, "ordered": boolean,
		"payload": described("the payload, when it is JSON"), "payload_base64": base64s,
		"headers":  map[string]any{"type": []string{"object", "null"}, "additionalProperties": str},
		"attempts": integer, "max_attempts": integer, "created_at": when, "died_at": when, "last_error": str,
	}),
	"OutboxMessage": obj([]string{"id", "topic", "key", "ordered", "headers", "state", "created_at", "available_at", "attempts", "max_attempts",
		"fence", "leased_by", "last_error", "history"}, map[string]any{
		"id": integer, "topic": str, "key": str, "ordered": boolean,
		"payload": described("the payload, when it is JSON"), "payload_base64": base64s,
		"headers":      map[string]any{"type": []string{"object", "null"}, "additionalProperties": str},
		"state":        map[string]any{"type": "string", "enum": []string{"ready", "leased", "delivered", "dead"}},
		"created_at":   when,
		"available_at": typ("string", "ready: when it is due; leased: when the lease lapses; delivered or dead: since when (RFC 3339, UTC, milliseconds)"),
		"attempts":     integer, "max_attempts": integer,
		"fence":     typ("integer", "the latest tenure's fence; 0 before the first"),
		"leased_by": typ("string", "the worker of the latest tenure"), "last_error": str,
		"history": arrayOf(obj([]string{"fence", "attempt", "worker", "at", "outcome", "error"}, map[string]any{
			"fence": integer, "attempt": integer, "worker": str, "at": when,
			"outcome": map[string]any{"type": "string", "enum": []string{"retry", "dead", "lapsed"}}, "error": str}), "the latest failed attempts, oldest first"),
	}),
	"RepairedMessage": obj([]string{"id", "state"}, map[string]any{"id": integer, "state": map[string]any{"type": "string", "enum": []string{"ready", "discarded"}}}),
}

// apiRoutes describes every route of the API, by its pattern.
var apiRoutes = map[string]apiRoute{
	"GET /healthz": {summary: "Answers 200 while the process is up", anonymous: true,
		response: obj([]string{"status"}, map[string]any{"status": str})},
	"GET /readyz": {summary: "Answers 200 while the database answers, accepts writes and its schema is current", anonymous: true,
		response: obj([]string{"status", "engine"}, map[string]any{"status": str, "engine": str,
			"warnings": map[string]any{"type": "array", "description": "PostgreSQL: present when the database role racefree serves as escapes row-level security (itself or through a role it can become); still ready",
				"items": obj([]string{"code", "detail"}, map[string]any{"code": typ("string", "role-is-superuser, role-bypasses-rls, role-owns-tables, role-creates-roles, role-reaches-server-files or role-not-judged"), "detail": str})},
			"doctor": map[string]any{"type": "array", "description": "present once serve ran racefree doctor's checks (at start): each finding's stable code (README, racefree doctor) and severity (info, warn or error); empty when it found nothing; still ready",
				"items": obj([]string{"code", "severity"}, map[string]any{"code": str, "severity": typ("string", "info, warn or error")})}}),
		problems: []problem.Kind{problem.NotReady, problem.ReadOnly}},
	"GET /openapi.json": {summary: "This document", anonymous: true, response: typ("object", "OpenAPI 3.1")},
	"GET /metrics": {summary: "Prometheus metrics, in the text exposition format; with serve --metrics-token, scrapes carry it as a bearer token", metrics: true,
		textResponse: "text/plain", problems: []problem.Kind{problem.Unauthorized}},

	"POST /v1/claims/{key}": {summary: "Acquire the claim on key: exactly one holder wins; the holder's own live claim is won again with its fence",
		path: map[string]any{"key": claimKeyParam}, idempotent: true,
		request:  bodySchema(acquireRequest{}, []string{"holder", "ttl_ms"}, map[string]any{"holder": holder, "ttl_ms": claimTTL}),
		response: ref("Claim"), problems: []problem.Kind{problem.Held}},
	"POST /v1/claims/{key}/renew": {summary: "Extend the live claim of (holder, fence); the fence is kept",
		path: map[string]any{"key": claimKeyParam}, idempotent: true,
		request:  bodySchema(renewRequest{}, []string{"holder", "fence", "ttl_ms"}, map[string]any{"holder": holder, "fence": fence, "ttl_ms": claimTTL}),
		response: ref("Claim"), problems: []problem.Kind{problem.StaleFence, problem.NotHeld}},
	"DELETE /v1/claims/{key}": {summary: "Release the tenure of (holder, fence) now. A retry whose first attempt's reply was lost succeeds while no other tenure began; once another holder took the key it is 409 stale-fence though the first attempt may have released: an unknown outcome, not a refusal",
		path:     map[string]any{"key": claimKeyParam},
		query:    []param{{"holder", holder, true}, {"fence", fence, true}},
		problems: []problem.Kind{problem.InvalidInput, problem.StaleFence, problem.NotHeld}},
	"GET /v1/claims/{key}": {summary: "Read the claim on key", path: map[string]any{"key": claimKeyParam}, response: ref("Claim"),
		problems: []problem.Kind{problem.InvalidInput, problem.NotFound}},
	"POST /v1/events": {summary: "Observe an event: process it only when process is true (one fence per window)",
		idempotent: true, request: bodySchema(observeRequest{}, []string{"source", "level", "message"}, map[string]any{
			"source":      textSchema(dedup.MaxSourceBytes, "where the event comes from"),
			"level":       textSchema(dedup.MaxLevelBytes, "its level"),
			"message":     textSchema(dedup.MaxMessageBytes, "its message, normalised into the fingerprint"),
			"fingerprint": optionalTextSchema(claim.MaxKeyBytes, "the event's identity; empty or absent: derived from source, level and the normalised message"),
			"window_ms":   withDefault(intSchema(claim.MinTTL.Milliseconds(), claim.MaxTTL.Milliseconds(), "one fence per window of this many milliseconds"), dedup.DefaultWindow.Milliseconds()),
		}),
		response: obj([]string{"fingerprint", "process", "fence", "count", "first_seen", "last_seen"},
			map[string]any{"fingerprint": str, "process": boolean, "fence": integer, "count": integer, "first_seen": when, "last_seen": when})},
	"POST /v1/events/{fingerprint}/result": {summary: "Record the result of processing an event, under its fence",
		path: map[string]any{"fingerprint": pathTextSchema(claim.MaxKeyBytes, "the event's fingerprint")}, idempotent: true,
		request: bodySchema(recordRequest{}, []string{"fence"}, map[string]any{"fence": fence,
			"classification": optionalTextSchema(dedup.MaxResultBytes, ""), "external_id": optionalTextSchema(dedup.MaxResultBytes, "")}),
		response: obj([]string{"fingerprint", "fence", "classification", "external_id"},
			map[string]any{"fingerprint": str, "fence": integer, "classification": str, "external_id": str}),
		problems: []problem.Kind{problem.StaleFence, problem.NotHeld, problem.NotFound}},
	"GET /v1/events/{fingerprint}": {summary: "Read an event and the result recorded for it",
		path: map[string]any{"fingerprint": pathTextSchema(claim.MaxKeyBytes, "the event's fingerprint")},
		response: obj([]string{"fingerprint", "source", "level", "message", "classification", "external_id", "result_fence"},
			map[string]any{"fingerprint": str, "source": str, "level": str, "message": str, "classification": str, "external_id": str,
				"result_fence": typ("integer", "the fence the result was recorded at; 0 when none was recorded")}),
		problems: []problem.Kind{problem.InvalidInput, problem.NotFound}},

	"POST /v1/inbox/{source}": {summary: "Receive a Standard Webhooks delivery, at most once per event id: 204 for a new delivery and for a duplicate", signed: true,
		path:    map[string]any{"source": map[string]any{"type": "string", "pattern": sourceName.String(), "description": "a configured source"}},
		request: map[string]any{"description": "the delivery's body, as signed (any bytes, at most serve's --inbox-max-body)"},
		requestHeaders: []param{
			{"webhook-id", textSchema(inbox.MaxEventIDLen, "the event's id: a redelivery carries the same"), true},
			{"webhook-timestamp", map[string]any{"type": "string", "pattern": "^[0-9]+$", "description": "Unix seconds, within five minutes of the server's clock"}, true},
			{"webhook-signature", map[string]any{"type": "string", "description": "v1,<base64 HMAC-SHA256>, space-separated when several"}, true},
		},
		problems: []problem.Kind{problem.InvalidInput, problem.UnknownSource, problem.BadSignature, problem.TooLarge}},
	"GET /v1/inbox/{source}": {summary: "List the source's received deliveries, oldest first",
		path:  map[string]any{"source": map[string]any{"type": "string", "pattern": sourceName.String(), "description": "a configured source"}},
		query: []param{afterParam, limitParam(inbox.MaxListLimit)},
		response: obj([]string{"events", "next"}, map[string]any{"events": arrayOf(obj([]string{"seq", "id", "status", "received_at", "payload"}, map[string]any{
			"seq": integer, "id": str, "status": str, "reason": str, "received_at": when,
			"payload": described("the JSON body, or a string when it is not JSON")}), ""), "next": cursor}),
		problems: []problem.Kind{problem.InvalidInput, problem.UnknownSource}},

	"POST /v1/sequences/{scope}/{name}/next": {summary: "Hand out n gapless numbers of the counter; a retry gets the same numbers",
		path:       map[string]any{"scope": pathTextSchema(seq.MaxScopeBytes, "the counter's scope"), "name": pathTextSchema(seq.MaxNameBytes, "the counter's name")},
		idempotent: true, request: bodySchema(nextRequest{}, nil, map[string]any{"n": withDefault(intSchema(1, seq.MaxN, "how many numbers"), 1)}),
		response: obj([]string{"scope", "name", "first", "last"}, map[string]any{"scope": str, "name": str, "first": integer, "last": integer}),
		problems: []problem.Kind{problem.SequenceExhausted}},
	"GET /v1/sequences/{scope}/{name}": {summary: "The last number the counter handed out (0: none); no lock, so not the next one",
		path:     map[string]any{"scope": pathTextSchema(seq.MaxScopeBytes, "the counter's scope"), "name": pathTextSchema(seq.MaxNameBytes, "the counter's name")},
		response: obj([]string{"scope", "name", "current"}, map[string]any{"scope": str, "name": str, "current": typ("integer", "the last number handed out; 0 when none was")}),
		problems: []problem.Kind{problem.InvalidInput}},

	"POST /v1/tokens": {summary: "Issue a one-time code or a refresh token (never stored, so no Idempotency-Key)",
		request: issueSchema,
		response: obj([]string{"kind", "token", "subject", "expires_at"}, map[string]any{
			"kind": map[string]any{"type": "string", "enum": []string{"code", "refresh"}}, "token": typ("string", "the token, in clear, once"),
			"purpose": typ("string", "a code's"), "subject": str, "issued_at": typ("string", "a code's: RFC 3339, UTC, milliseconds"), "expires_at": when,
			"outcome": typ("string", "a refresh token's: issued"), "generation": typ("integer", "a refresh token's")}),
		problems: []problem.Kind{problem.InvalidInput, problem.TooLarge}},
	"POST /v1/tokens/consume": {summary: "Consume a one-time code: exactly once", idempotent: true,
		request: bodySchema(consumeTokenRequest{}, []string{"purpose", "token"}, map[string]any{
			"purpose": textSchema(onetime.MaxPurposeBytes, "what the code was issued for"), "token": tokenString}),
		response: obj([]string{"outcome", "purpose", "subject", "issued_at", "expires_at", "used_at"}, map[string]any{
			"outcome": map[string]any{"const": "consumed"}, "purpose": str, "subject": str, "issued_at": when, "expires_at": when, "used_at": when}),
		problems: []problem.Kind{problem.TokenUnknown, problem.TokenUsed, problem.TokenExpired}},
	"POST /v1/tokens/rotate": {summary: "Rotate a refresh token; reuse revokes its family (no Idempotency-Key: retry within the grace window)",
		request:  bodySchema(rotateRequest{}, []string{"token"}, map[string]any{"token": tokenString}),
		response: refreshToken,
		problems: []problem.Kind{problem.InvalidInput, problem.TooLarge, problem.TokenUnknown, problem.TokenReused, problem.TokenRevoked, problem.TokenExpired}},

	"POST /v1/audit": {summary: "Append an entry to a scope's tamper-evident chain", idempotent: true,
		request: bodySchema(appendRequest{}, []string{"scope", "actor", "action"}, map[string]any{
			"scope": auditScope, "actor": textSchema(audit.MaxActorLen, "who acted"),
			"action": func() map[string]any {
				s := textSchema(audit.MaxActionLen, "what was done; racefree's own actions are refused")
				s["not"] = map[string]any{"enum": []string{audit.ActionKeyRotated, audit.ActionPruned, audit.ActionTimelineChanged}}
				return s
			}(),
			"subject": optionalTextSchema(audit.MaxSubjectLen, "what it was done to"),
			"data":    map[string]any{"description": "any JSON value, kept as sent: at most " + strconv.Itoa(audit.MaxDataLen) + " bytes as sent"},
		}),
		response: ref("AuditEntry"), problems: []problem.Kind{problem.AuditUnconfigured, problem.AuditKeyMissing}},
	"GET /v1/audit": {summary: "List a scope's entries in order", response: obj([]string{"entries", "next"}, map[string]any{"entries": arrayOf(ref("AuditEntry"), ""), "next": cursor}),
		query:    []param{{"scope", auditScope, true}, afterParam, limitParam(audit.MaxListLimit)},
		problems: []problem.Kind{problem.InvalidInput, problem.AuditUnconfigured}},
	"GET /v1/audit/verify": {summary: "Verify a scope's chain against the stored checkpoints; a broken chain is 200 with intact false",
		query: []param{{"scope", auditScope, true}}, response: ref("AuditVerification"),
		problems: []problem.Kind{problem.InvalidInput, problem.AuditUnconfigured, problem.AuditKeyMissing}},
	"POST /v1/audit/checkpoints": {summary: "Sign a checkpoint of a scope's head (admin scope)", idempotent: true,
		request: bodySchema(checkpointRequest{}, []string{"scope"}, map[string]any{"scope": auditScope}), response: ref("Checkpoint"),
		problems: []problem.Kind{problem.AuditUnconfigured, problem.AuditKeyMissing}},
	"GET /v1/audit/checkpoints/latest": {summary: "The scope's latest checkpoint", query: []param{{"scope", auditScope, true}},
		response: ref("Checkpoint"), problems: []problem.Kind{problem.InvalidInput, problem.AuditUnconfigured, problem.NotFound}},

	"POST /v1/quotas/{key}/consume": {summary: "Charge n units of key under a policy: never more than the limit; a denial charges nothing",
		path: map[string]any{"key": pathTextSchema(quota.MaxKeyBytes, "the quota's key")}, idempotent: true,
		request: bodySchema(consumeQuotaRequest{}, []string{"policy"}, map[string]any{
			"n":      withDefault(intSchema(1, quota.MaxUnits, "units to charge, at most the policy's limit (burst for gcra, else rate)"), 1),
			"policy": policySchema}),
		response: obj([]string{"allowed", "remaining", "reset_at"}, map[string]any{"allowed": map[string]any{"const": true}, "remaining": intSchema(0, math.MaxInt64, "the units the key could be charged now"), "reset_at": when}),
		problems: []problem.Kind{problem.QuotaExceeded}, headers: rateLimitHeaders},

	"POST /v1/outbox": {summary: "Enqueue a message, delivered after commit until a permanent failure", idempotent: true,
		request: enqueueSchema,
		response: obj([]string{"id", "idempotency_key", "topic", "key"}, map[string]any{"id": integer,
			"idempotency_key": typ("string", "the Idempotency-Key each delivery carries: the id"), "topic": str, "key": str}),
	},
	"GET /v1/outbox/messages/{id}": {summary: "Read a message in any state, with its failure history",
		path: map[string]any{"id": positive("the message's id, as POST /v1/outbox answered it")}, response: ref("OutboxMessage"),
		problems: []problem.Kind{problem.InvalidInput, problem.NotFound}},
	"GET /v1/outbox/dead": {summary: "List dead letters, by id",
		query: []param{{"topic", optionalTextSchema(outbox.MaxTopicBytes, "only this topic (empty: every topic)"), false}, {"key", optionalTextSchema(outbox.MaxKeyBytes, "only this key (empty: every key)"), false},
			afterParam, limitParam(outbox.MaxPage)},
		response: obj([]string{"messages", "next"}, map[string]any{"messages": arrayOf(ref("DeadMessage"), ""), "next": cursor}),
		problems: []problem.Kind{problem.InvalidInput}},
	"GET /v1/outbox/stats": {summary: "Backlog figures: pending, dead, delivered",
		response: obj([]string{"backlog", "ready", "due", "leased", "oldest_pending_ms", "dead", "delivered"}, map[string]any{
			"backlog": integer, "ready": integer, "due": integer, "leased": integer, "oldest_pending_ms": integer, "dead": integer, "delivered": integer})},
	"POST /v1/outbox/dead/{id}/redrive": {summary: "Send a dead letter again (admin scope)", idempotent: true,
		path: map[string]any{"id": positive("the dead message's id")}, optionalBody: true,
		request:  map[string]any{"type": "object", "additionalProperties": false, "description": "none, or {}"},
		response: ref("RepairedMessage"), problems: []problem.Kind{problem.NotFound}},
	"POST /v1/outbox/dead/{id}/discard": {summary: "Discard a dead letter (admin scope)", idempotent: true,
		path: map[string]any{"id": positive("the dead message's id")}, optionalBody: true,
		request:  map[string]any{"type": "object", "additionalProperties": false, "description": "none, or {}"},
		response: ref("RepairedMessage"), problems: []problem.Kind{problem.NotFound}},
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
	"not-durable":               "the server requires synchronous replication (--require-synchronous-replication) and no synchronous standby would wait for the write's commit: the write wrote nothing; retry after Retry-After with the same Idempotency-Key",
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
// (the Idempotency-Key's), of a route with a JSON body (its media type),
// and method-not-allowed.
func problemsOf(pattern string, r apiRoute) []problem.Kind {
	kinds := append([]problem.Kind{problem.MethodNotAllowed}, r.problems...)
	if strings.Contains(pattern, " /v1/") {
		kinds = append(kinds, problem.Internal, problem.Unavailable, problem.ReadOnly, problem.NotDurable, problem.Schema)
		if !r.signed {
			kinds = append(kinds, problem.Unauthorized, problem.InsufficientScope)
		}
	}
	if r.idempotent {
		kinds = append(kinds, problem.InvalidInput, problem.TooLarge, problem.IdempotencyMalformed, problem.InProgress, problem.KeyMismatch)
	}
	if r.request != nil && !r.signed {
		kinds = append(kinds, problem.UnsupportedMediaType)
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
		case "unavailable", "read-only", "not-durable", "idempotency-in-progress", "schema", "not-ready":
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
			schema, ok := r.path[name].(map[string]any)
			if !ok {
				panic("openapi: " + pattern + " has no schema for its path parameter " + name)
			}
			params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": schema})
		}
		for _, q := range r.query {
			params = append(params, map[string]any{"name": q.name, "in": "query", "required": q.required, "schema": q.schema})
		}
		for _, h := range r.requestHeaders {
			params = append(params, map[string]any{"name": h.name, "in": "header", "required": h.required, "schema": h.schema})
		}
		if r.idempotent {
			params = append(params, map[string]any{"$ref": "#/components/parameters/Idempotency-Key"})
		}
		params = append(params, map[string]any{"$ref": "#/components/parameters/X-Request-Id"})
		op["parameters"] = params
		switch {
		case r.signed:
			op["requestBody"] = map[string]any{"required": true, "description": r.request["description"],
				"content": map[string]any{"*/*": map[string]any{"schema": map[string]any{}}}}
		case r.request != nil:
			op["requestBody"] = map[string]any{"required": !r.optionalBody, "content": map[string]any{"application/json": map[string]any{"schema": r.request}}}
		}
		ok := map[string]any{"headers": map[string]any{"X-Request-Id": headerRef("X-Request-Id")}}
		status := "200"
		switch {
		case r.textResponse != "":
			ok["description"] = "OK"
			ok["content"] = map[string]any{r.textResponse: map[string]any{"schema": str}}
		case r.response == nil:
			status, ok["description"] = "204", "done"
		default:
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
		switch {
		case r.anonymous || r.signed:
			op["security"] = []any{}
		case r.metrics:
			op["security"] = []any{map[string]any{}, map[string]any{"bearer": []any{}}} // with --metrics-token only
		}
		if strings.HasPrefix(path, "/v1/") && !r.signed {
			op["x-scope"] = documentedScope(pattern)
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
			"description": apiDescription},
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

// OpenAPIJSON returns OpenAPI as indented JSON with a final newline, the
// form racefree openapi prints and clients/typescript/openapi.json holds
// (its keys sorted, so the same document is the same bytes).
func OpenAPIJSON() ([]byte, error) {
	b, err := json.MarshalIndent(OpenAPI(), "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
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

// apiDescription is the document's info.description. The routes it says
// are left out are outsideAPI's, so that it never lags behind them.
var apiDescription = "Concurrency and retry primitives with the database as the referee. Errors are RFC 9457 problem documents; x-problems lists every type.\n\n" +
	"Every route the server serves is described here except the dashboard's pages and forms (" + strings.ReplaceAll(strings.Join(outsideAPI, ", "), "{$}", "") + "): HTML for people, behind a session cookie and a CSRF token, not part of the API.\n\n" +
	"The schemas state the server's limits: a request that breaks one is answered 400 invalid-input and changes nothing. Text is counted in bytes of UTF-8 (x-max-bytes; maxLength, in characters, is the same number and so only a necessary condition) and never holds a NUL byte. " +
	"A JSON body is an object with exactly the properties listed (additionalProperties is false; null stands for no value only where a schema allows it). Integers are written without a fraction or an exponent. " +
	"x-scope names the API key scope a /v1/ route needs."
