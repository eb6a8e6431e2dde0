package client

import (
	"context"
	"errors"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/onetime"
)

// IssueCode issues a one-time code of purpose for subject, live for ttl
// (whole milliseconds), as [onetime.Store.Issue] (POST /v1/tokens, kind
// code). The answer carries the code in clear, which racefree never
// stores: a retry after a lost reply issues another code (the lost one
// expires unused).
func (c *Client) IssueCode(ctx context.Context, purpose, subject string, ttl time.Duration) (*onetime.Code, error) {
	if err := checkTokenTTL(ttl); err != nil {
		return nil, err
	}
	var out struct {
		Token, Purpose, Subject string
		IssuedAt                time.Time `json:"issued_at"`
		ExpiresAt               time.Time `json:"expires_at"`
	}
	err := c.do(ctx, call{method: "POST", path: "/v1/tokens", body: map[string]any{"kind": "code", "purpose": purpose, "subject": subject, "ttl_ms": ttl.Milliseconds()}}, &out)
	if err != nil {
		return nil, err
	}
	return &onetime.Code{Token: out.Token, Purpose: out.Purpose, Subject: out.Subject, IssuedAt: out.IssuedAt, ExpiresAt: out.ExpiresAt}, nil
}

// ConsumeCode redeems a code of purpose, as [onetime.Store.Consume] (POST
// /v1/tokens/consume): exactly one caller ever gets [onetime.Consumed] for a
// code. A refusal is not an error but a Redemption whose Outcome says why
// (AlreadyUsed, Revoked, Expired, Unknown). A retry after a lost reply
// carries the same Idempotency-Key and gets the same Consumed back.
func (c *Client) ConsumeCode(ctx context.Context, purpose, token string) (onetime.Redemption, error) {
	var out struct {
		Subject   string
		IssuedAt  time.Time `json:"issued_at"`
		ExpiresAt time.Time `json:"expires_at"`
		UsedAt    time.Time `json:"used_at"`
	}
	err := c.do(ctx, call{method: "POST", path: "/v1/tokens/consume", body: map[string]any{"purpose": purpose, "token": token}, idempotent: true}, &out)
	if o, ok := refusal(err); ok {
		return onetime.Redemption{Outcome: o}, nil
	}
	if err != nil {
		return onetime.Redemption{}, err
	}
	return onetime.Redemption{Outcome: onetime.Consumed, Subject: out.Subject, IssuedAt: out.IssuedAt, ExpiresAt: out.ExpiresAt, UsedAt: out.UsedAt}, nil
}

// IssueRefresh starts a refresh-token family for subject, its first token
// live for ttl (whole milliseconds), as [onetime.Store.IssueRefresh] (POST
// /v1/tokens, kind refresh). Like IssueCode, a lost reply means another
// family.
func (c *Client) IssueRefresh(ctx context.Context, subject string, ttl time.Duration) (*onetime.Refresh, error) {
	if err := checkTokenTTL(ttl); err != nil {
		return nil, err
	}
	var out refreshJSON
	err := c.do(ctx, call{method: "POST", path: "/v1/tokens", body: map[string]any{"kind": "refresh", "subject": subject, "ttl_ms": ttl.Milliseconds()}}, &out)
	if err != nil {
		return nil, err
	}
	return out.refresh(), nil
}

// Rotate retires a refresh token and returns its successor, as
// [onetime.Store.Rotate] (POST /v1/tokens/rotate): Outcome Rotated (Next
// set), Replayed (a retry within the server's --refresh-grace: the same
// successor), or a refusal with Next nil (Reused: the token had been
// rotated before, and its whole family is now revoked; Revoked, Expired,
// Unknown). It is sent once, never retried by the client: a retry after
// the grace window would revoke the family. Retry it yourself, at once,
// when the reply was lost.
func (c *Client) Rotate(ctx context.Context, token string) (onetime.Rotation, error) {
	var out refreshJSON
	once := *c
	once.opts.Attempts = 1
	err := once.do(ctx, call{method: "POST", path: "/v1/tokens/rotate", body: map[string]any{"token": token}}, &out)
	if o, ok := refusal(err); ok {
		return onetime.Rotation{Outcome: o}, nil
	}
	if err != nil {
		return onetime.Rotation{}, err
	}
	o := onetime.Rotated
	if out.Outcome == onetime.Replayed.String() {
		o = onetime.Replayed
	}
	return onetime.Rotation{Outcome: o, Next: out.refresh()}, nil
}

type refreshJSON struct {
	Outcome    string
	Token      string
	Subject    string
	ExpiresAt  time.Time `json:"expires_at"`
	Generation int64
}

func (j *refreshJSON) refresh() *onetime.Refresh {
	return &onetime.Refresh{Token: j.Token, Subject: j.Subject, ExpiresAt: j.ExpiresAt, Generation: j.Generation}
}

// refusal returns the outcome of a token the server refused (a token-*
// problem with an outcome member).
func refusal(err error) (onetime.Outcome, bool) {
	var e *Error
	if !errors.As(err, &e) {
		return 0, false
	}
	var name string
	if !e.member("outcome", &name) {
		return 0, false
	}
	for o := onetime.AlreadyUsed; o <= onetime.Unknown; o++ {
		if o.String() == name {
			return o, true
		}
	}
	return 0, false
}

func checkTokenTTL(ttl time.Duration) error {
	if ttl < onetime.MinTTL || ttl > onetime.MaxTTL || ttl%time.Millisecond != 0 {
		return racefree.Invalid("ttl", "must be whole milliseconds between %v and %v, got %v", onetime.MinTTL, onetime.MaxTTL, ttl)
	}
	return nil
}
