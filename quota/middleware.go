package quota

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/problem"
)

// KeyFunc returns the key to charge for a request: a tenant, an API key,
// a client address (KeyByIP). An error is answered 400 invalid-input and
// charges nothing.
type KeyFunc func(r *http.Request) (string, error)

// Middleware returns net/http middleware that charges one unit of key(r)
// under p, through exec (the pool: each charge commits on its own), for
// every request, before the request reaches next. The charge is the
// tenant's that the request's context names (tenant.With, set by the
// authentication middleware in front of this one; tenant.Default when
// none): two tenants' clients with the same key have a limit each.
//
//   - Allowed: next serves the request, and the response carries
//     RateLimit-Policy and RateLimit headers as in
//     draft-ietf-httpapi-ratelimit-headers (the two-field form):
//     `RateLimit-Policy: "name";q=<limit>;w=<seconds to refill fully>` and
//     `RateLimit: "name";r=<remaining>;t=<seconds until full>`.
//   - Denied: 429 with Retry-After in whole seconds (rounded up, at least
//     1) and a problem+json body of type quota-exceeded with
//     retry_after_ms, the exact wait. next is not called.
//   - The database does not answer within p.Wait: FailOpen serves the
//     request without RateLimit headers; FailClosed answers 503
//     unavailable with Retry-After.
//   - The schema is too old for the tenant (before migration 011, or 012
//     for a tenant other than the default): 503 schema.
//
// A Shadow policy never answers 429: its refusals pass with their headers.
func (l *Limiter) Middleware(exec racefree.Executor, p Policy, key KeyFunc) (func(http.Handler) http.Handler, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if key == nil {
		return nil, racefree.Invalid("key", "a KeyFunc is required")
	}
	policy := p.RateLimitPolicy()
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, err := key(r)
			if err == nil {
				err = racefree.CheckText("key", k, MaxKeyBytes)
			}
			if err != nil {
				problem.Write(w, problem.InvalidInput.New(err.Error()))
				return
			}
			d, err := l.Consume(r.Context(), exec, k, 1, p)
			switch {
			case err != nil && (d.Degraded || errors.Is(err, racefree.ErrUnavailable)):
				problem.Write(w, problem.Unavailable.New("the rate limiter's database did not answer"))
				return
			case errors.Is(err, racefree.ErrSchemaOutdated), errors.Is(err, racefree.ErrSchemaTooNew):
				// e.g. a tenant other than the default before migration 012
				problem.Write(w, problem.Schema.New(err.Error()))
				return
			case err != nil:
				problem.Write(w, problem.Internal.New(""))
				return
			case d.Degraded:
				next.ServeHTTP(w, r)
				return
			}
			h := w.Header()
			h.Set("RateLimit-Policy", policy)
			h.Set("RateLimit", p.RateLimit(d))
			if !d.Allowed {
				h.Set("Retry-After", strconv.FormatInt(max(1, seconds(d.RetryAfter)), 10))
				p := problem.QuotaExceeded.New(fmt.Sprintf("retry in %d ms", d.RetryAfter.Milliseconds()))
				p.Extra = map[string]any{"retry_after_ms": d.RetryAfter.Milliseconds()}
				problem.Write(w, p)
				return
			}
			next.ServeHTTP(w, r)
		})
	}, nil
}

// RateLimitPolicy returns p's RateLimit-Policy field, as Middleware sends
// it (draft-ietf-httpapi-ratelimit-headers, a structured-field list of one
// item): `"name";q=<limit>;w=<window>`, where name is p.Name ("default"
// when empty), the limit is Burst for GCRA and Rate for the windows, and
// the window is the seconds, rounded up, that an empty key takes to be
// full again: Burst × Per/Rate for GCRA, Per for the windows. p must be
// valid (Validate): its name is then a plain token.
func (p Policy) RateLimitPolicy() string {
	window := p.Per
	if p.Kind == GCRA {
		window = time.Duration(p.Burst*p.interval()) * time.Millisecond
	}
	return fmt.Sprintf("%q;q=%d;w=%d", p.rateLimitName(), p.limit(), seconds(window))
}

// RateLimit returns the RateLimit field of decision d under p, as
// Middleware sends it: `"name";r=<remaining>;t=<reset>`, where remaining
// is d.Remaining and reset is d.ResetAfter in seconds, rounded up: how
// long until the key is full again, as of the decision.
func (p Policy) RateLimit(d Decision) string {
	return fmt.Sprintf("%q;r=%d;t=%d", p.rateLimitName(), d.Remaining, seconds(d.ResetAfter))
}

// rateLimitName is the policy's name in the RateLimit fields.
func (p Policy) rateLimitName() string {
	if p.Name == "" {
		return "default"
	}
	return p.Name
}

// seconds rounds d up to whole seconds.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// KeyByIP is a KeyFunc that charges the client's address, taken from
// r.RemoteAddr (put a proxy's trusted forwarding header there first, with
// your own middleware): an IPv4 address on its own, an IPv6 address
// grouped by its /64, the block one subscriber is usually given, so that a
// client cannot escape its limit by hopping addresses. An IPv4-mapped IPv6
// address counts as the IPv4 address.
func KeyByIP(r *http.Request) (string, error) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", racefree.Invalid("remote address", "not an IP address: %q", r.RemoteAddr)
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is4() {
		return "ip:" + ip.String(), nil
	}
	prefix, _ := ip.Prefix(64)
	return "ip:" + prefix.String(), nil
}
