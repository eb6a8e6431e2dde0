package client

import (
	"context"
	"net/url"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/claim"
	"github.com/racefree/racefree/dedup"
)

// Observe records one occurrence of ev in the key's tenant, as
// [dedup.Log.Observe] (POST /v1/events): of all the observers of one
// fingerprint in one window, exactly one gets Process true and the window's
// fence, to pass to Record once its downstream work is done. A window of 0
// is the server's default ([dedup.DefaultWindow]); another must be whole
// milliseconds within the claim TTL limits. A retry after a lost reply
// carries the same Idempotency-Key and gets the same Observation back, so
// the occurrence is counted once and a won window is not lost. Bad input
// is a *racefree.InputError, nothing recorded.
func (c *Client) Observe(ctx context.Context, ev dedup.Event, window time.Duration) (*dedup.Observation, error) {
	body := map[string]any{"source": ev.Source, "level": ev.Level, "message": ev.Message}
	if ev.Fingerprint != "" {
		body["fingerprint"] = ev.Fingerprint
	}
	if window != 0 {
		if err := checkTTL(window); err != nil {
			return nil, racefree.Invalid("window", "must be whole milliseconds between %v and %v, got %v", claim.MinTTL, claim.MaxTTL, window)
		}
		body["window_ms"] = window.Milliseconds()
	}
	var out struct {
		Fingerprint string    `json:"fingerprint"`
		Process     bool      `json:"process"`
		Fence       int64     `json:"fence"`
		Count       int64     `json:"count"`
		FirstSeen   time.Time `json:"first_seen"`
		LastSeen    time.Time `json:"last_seen"`
	}
	if err := c.do(ctx, call{method: "POST", path: "/v1/events", body: body, idempotent: true}, &out); err != nil {
		return nil, err
	}
	return &dedup.Observation{Fingerprint: out.Fingerprint, Process: out.Process, Fence: out.Fence, Count: out.Count,
		FirstSeen: out.FirstSeen, LastSeen: out.LastSeen}, nil
}

// Record writes the downstream result of fingerprint while fence is its
// current fence, as [dedup.Log.Record] (POST /v1/events/{fingerprint}/result):
// a *claim.StaleFenceError ([racefree.ErrStaleFence]) when a later window was
// won since, an error matching [racefree.ErrNotHeld] when fence was never
// issued, [racefree.ErrNotFound] for an unknown (or reaped) fingerprint.
// Recording again at the same fence overwrites the result; a retry after a
// lost reply carries the same Idempotency-Key.
func (c *Client) Record(ctx context.Context, fingerprint string, fence int64, r dedup.Result) error {
	if err := racefree.CheckText("fingerprint", fingerprint, claim.MaxKeyBytes); err != nil {
		return err
	}
	if err := claim.ValidateFence(fence); err != nil {
		return err
	}
	body := map[string]any{"fence": fence}
	if r.Classification != "" {
		body["classification"] = r.Classification
	}
	if r.ExternalID != "" {
		body["external_id"] = r.ExternalID
	}
	err := c.do(ctx, call{method: "POST", path: "/v1/events/" + url.PathEscape(fingerprint) + "/result", body: body, idempotent: true}, nil)
	return claimError(fingerprint, fence, err)
}

// Event returns the stored event fingerprint of the key's tenant and the
// result recorded for it, as [dedup.Log.Get] (GET /v1/events/{fingerprint}):
// ResultFence is the fence the result was recorded at, 0 when none was. A
// fingerprint never observed, or reaped, is an error matching
// [racefree.ErrNotFound].
func (c *Client) Event(ctx context.Context, fingerprint string) (*dedup.Record, error) {
	if err := racefree.CheckText("fingerprint", fingerprint, claim.MaxKeyBytes); err != nil {
		return nil, err
	}
	var out struct {
		Fingerprint    string `json:"fingerprint"`
		Source         string `json:"source"`
		Level          string `json:"level"`
		Message        string `json:"message"`
		Classification string `json:"classification"`
		ExternalID     string `json:"external_id"`
		ResultFence    int64  `json:"result_fence"`
	}
	if err := c.do(ctx, call{method: "GET", path: "/v1/events/" + url.PathEscape(fingerprint)}, &out); err != nil {
		return nil, err
	}
	return &dedup.Record{Fingerprint: out.Fingerprint, Source: out.Source, Level: out.Level, Message: out.Message,
		Result: dedup.Result{Classification: out.Classification, ExternalID: out.ExternalID}, ResultFence: out.ResultFence}, nil
}
