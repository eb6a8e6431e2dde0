// Package problem writes RFC 9457 problem details documents, in the one
// shape every racefree HTTP handler answers errors with: a stable type
// urn:racefree:problem:<name>, a title, the status, an optional detail, and
// extension members.
//
// Every kind of problem racefree answers is registered once, in Kinds,
// with its one title and its one status: a client that branches on the
// type never sees it with another status.
package problem

import (
	"encoding/json"
	"net/http"
)

// Problem represents an RFC 9457 problem details document.
type Problem struct {
	Type   string // stable, e.g. "urn:racefree:problem:held"; see Type
	Title  string // short, the same for every instance of Type
	Status int    // the HTTP status
	Detail string // this occurrence; omitted when empty
	// Extra holds extension members, such as the live holder of a claim.
	Extra map[string]any
}

// Kind represents one kind of problem: its name, title and status are the
// same on every occurrence.
type Kind struct {
	Name   string // the last part of the type URI, e.g. "held"
	Title  string
	Status int
}

// The kinds of problem racefree answers with, in the order of the table
// in docs/server.md.
var (
	InvalidInput          = Kind{"invalid-input", "Invalid input", http.StatusBadRequest}
	IdempotencyKeyMissing = Kind{"idempotency-key-missing", "Idempotency-Key required", http.StatusBadRequest}
	IdempotencyMalformed  = Kind{"idempotency-key-malformed", "Malformed Idempotency-Key", http.StatusBadRequest}
	Unauthorized          = Kind{"unauthorized", "Unauthorized", http.StatusUnauthorized}
	BadSignature          = Kind{"bad-signature", "Bad webhook signature", http.StatusUnauthorized}
	InsufficientScope     = Kind{"insufficient-scope", "Insufficient scope", http.StatusForbidden}
	NotFound              = Kind{"not-found", "Not found", http.StatusNotFound}
	NoRoute               = Kind{"no-route", "No such route", http.StatusNotFound}
	UnknownSource         = Kind{"unknown-source", "Unknown inbox source", http.StatusNotFound}
	MethodNotAllowed      = Kind{"method-not-allowed", "Method not allowed", http.StatusMethodNotAllowed}
	Held                  = Kind{"held", "Held by another holder", http.StatusConflict}
	NotHeld               = Kind{"not-held", "Not held", http.StatusConflict}
	StaleFence            = Kind{"stale-fence", "Stale fencing token", http.StatusConflict}
	InProgress            = Kind{"idempotency-in-progress", "Request in progress", http.StatusConflict}
	SequenceExhausted     = Kind{"sequence-exhausted", "Sequence exhausted", http.StatusConflict}
	TooLarge              = Kind{"too-large", "Request body too large", http.StatusRequestEntityTooLarge}
	UnsupportedMediaType  = Kind{"unsupported-media-type", "Unsupported media type", http.StatusUnsupportedMediaType}
	KeyMismatch           = Kind{"idempotency-key-mismatch", "Idempotency-Key reused", http.StatusUnprocessableEntity}
	QuotaExceeded         = Kind{"quota-exceeded", "Quota exceeded", http.StatusTooManyRequests}
	Internal              = Kind{"internal", "Internal error", http.StatusInternalServerError}
	Unavailable           = Kind{"unavailable", "Temporarily unavailable", http.StatusServiceUnavailable}
	ReadOnly              = Kind{"read-only", "Database is read-only", http.StatusServiceUnavailable}
	NotDurable            = Kind{"not-durable", "No synchronous standby", http.StatusServiceUnavailable}
	IdempotencyUnknown    = Kind{"idempotency-unavailable", "Idempotency store unavailable", http.StatusServiceUnavailable}
	Schema                = Kind{"schema", "Database schema mismatch", http.StatusServiceUnavailable}
	NotReady              = Kind{"not-ready", "Not ready", http.StatusServiceUnavailable}

	// Refusals of one-time codes and refresh tokens (onetime).
	TokenUnknown = Kind{"token-unknown", "Unknown token", http.StatusNotFound}
	TokenUsed    = Kind{"token-used", "Token already used", http.StatusConflict}
	TokenReused  = Kind{"token-reused", "Refresh token reused", http.StatusConflict}
	TokenRevoked = Kind{"token-revoked", "Token revoked", http.StatusConflict}
	TokenExpired = Kind{"token-expired", "Token expired", http.StatusGone}
	// The audit log's kinds.
	AuditUnconfigured = Kind{"audit-unconfigured", "Audit log not configured", http.StatusNotFound}
	AuditKeyMissing   = Kind{"audit-key-missing", "Audit key missing from the keyring", http.StatusInternalServerError}
)

// Kinds returns every registered kind.
func Kinds() []Kind {
	return []Kind{InvalidInput, IdempotencyKeyMissing, IdempotencyMalformed, Unauthorized, BadSignature, InsufficientScope,
		NotFound, NoRoute, UnknownSource, MethodNotAllowed, Held, NotHeld, StaleFence, InProgress, SequenceExhausted, TooLarge,
		UnsupportedMediaType, KeyMismatch, QuotaExceeded, Internal, Unavailable, ReadOnly, NotDurable, IdempotencyUnknown, Schema, NotReady,
		TokenUnknown, TokenUsed, TokenReused, TokenRevoked, TokenExpired,
		AuditUnconfigured, AuditKeyMissing}
}

// aliases are names used before the registry, kept so that old call sites
// answer with the registered kind.
var aliases = map[string]Kind{
	"body-too-large": TooLarge,
	"retry":          Unavailable,
}

// Lookup returns the registered kind of name (or of a former name).
func Lookup(name string) (Kind, bool) {
	if k, ok := aliases[name]; ok {
		return k, true
	}
	for _, k := range Kinds() {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Type returns the stable type URI of k.
func (k Kind) Type() string { return Type(k.Name) }

// New returns a problem of kind k with detail.
func (k Kind) New(detail string) Problem {
	return Problem{Type: k.Type(), Title: k.Title, Status: k.Status, Detail: detail}
}

// Type returns the stable type URI for name.
func Type(name string) string { return "urn:racefree:problem:" + name }

// RetryAfterSeconds is the Retry-After that Write adds to a 503 without
// one.
const RetryAfterSeconds = "1"

// MarshalJSON writes the standard members followed by the extensions.
func (p Problem) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for k, v := range p.Extra {
		m[k] = v
	}
	m["type"], m["title"], m["status"] = p.Type, p.Title, p.Status
	if p.Detail != "" {
		m["detail"] = p.Detail
	}
	return json.Marshal(m)
}

// RequestIDHeader is the response header that carries the request's id;
// Write echoes it in the body as request_id.
const RequestIDHeader = "X-Request-Id"

// Write answers with p as application/problem+json. A 503 always carries
// Retry-After: the caller's, or RetryAfterSeconds. When the response
// already carries RequestIDHeader, the body has it as request_id.
func Write(w http.ResponseWriter, p Problem) {
	if id := w.Header().Get(RequestIDHeader); id != "" {
		extra := map[string]any{"request_id": id}
		for k, v := range p.Extra {
			extra[k] = v
		}
		p.Extra = extra
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	if p.Status == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
		w.Header().Set("Retry-After", RetryAfterSeconds)
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// New returns the problem of the registered kind name, with its registered
// title and status; status and title are used only for a name that is not
// registered (a test keeps every call site's name registered).
func New(status int, name, title, detail string) Problem {
	if k, ok := Lookup(name); ok {
		return k.New(detail)
	}
	return Problem{Type: Type(name), Title: title, Status: status, Detail: detail}
}
