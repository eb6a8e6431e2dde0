package client

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/audit"
)

// Verify verifies the chain of scope of the key's tenant on the server, as
// [audit.Log.Verify] (GET /v1/audit/verify), against the checkpoints stored
// in the server's database. A broken chain is a Result whose Break is set,
// not an error; the error is for what kept the server from deciding (a
// server without an audit keyring answers audit-unconfigured).
func (c *Client) Verify(ctx context.Context, scope string) (audit.Result, error) {
	var out audit.Result
	err := c.do(ctx, call{method: "GET", path: "/v1/audit/verify", query: url.Values{"scope": {scope}}}, &out)
	return out, err
}

// entryJSON is an audit entry as the server answers it.
type entryJSON struct {
	Scope      string          `json:"scope"`
	Seq        int64           `json:"seq"`
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	Subject    string          `json:"subject"`
	Data       json.RawMessage `json:"data"`
	DataBase64 []byte          `json:"data_base64"`
	KeyID      string          `json:"key_id"`
	PrevMAC    []byte          `json:"prev_mac"`
	MAC        []byte          `json:"mac"`
}

func (e *entryJSON) record() audit.Record {
	r := audit.Record{Entry: audit.Entry{Actor: e.Actor, Action: e.Action, Subject: e.Subject}, Scope: e.Scope, Seq: e.Seq,
		At: e.At, KeyID: e.KeyID, PrevMAC: e.PrevMAC, MAC: e.MAC}
	switch {
	case len(e.DataBase64) > 0:
		r.Data = e.DataBase64
	case len(e.Data) > 0:
		r.Data = []byte(e.Data)
	}
	return r
}

// Append appends e to the chain of scope of the key's tenant, as
// [audit.Log.Append] (POST /v1/audit), and returns the entry as stored:
// numbered (gapless within the scope), timed by the server and chained.
// Over HTTP the data must be JSON (or empty); other bytes are a
// *racefree.InputError before any request. A retry after a lost reply
// carries the same Idempotency-Key and returns the entry already appended,
// never a second one. Record.Tenant is left empty: it is the key's.
func (c *Client) Append(ctx context.Context, scope string, e audit.Entry) (audit.Record, error) {
	body := map[string]any{"scope": scope, "actor": e.Actor, "action": e.Action}
	if e.Subject != "" {
		body["subject"] = e.Subject
	}
	if len(e.Data) > 0 {
		if !json.Valid(e.Data) {
			return audit.Record{}, racefree.Invalid("data", "must be JSON over HTTP")
		}
		body["data"] = json.RawMessage(e.Data)
	}
	var out entryJSON
	if err := c.do(ctx, call{method: "POST", path: "/v1/audit", body: body, idempotent: true}, &out); err != nil {
		return audit.Record{}, err
	}
	return out.record(), nil
}

// Entries returns the entries of scope of the key's tenant numbered above
// after, at most limit (1 to [audit.MaxListLimit]; 0: the server's default),
// oldest first, as [audit.Log.List] (GET /v1/audit); page on with after set
// to the last Seq returned until none is. A page also stops at
// 4 MiB of JSON (server.MaxPageBytes), so fewer than limit is not the end.
func (c *Client) Entries(ctx context.Context, scope string, after int64, limit int) ([]audit.Record, error) {
	if limit < 0 || limit > audit.MaxListLimit {
		return nil, racefree.Invalid("limit", "must be between 1 and %d, or 0 for the server's default", audit.MaxListLimit)
	}
	q := url.Values{"scope": {scope}}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Entries []entryJSON `json:"entries"`
	}
	if err := c.do(ctx, call{method: "GET", path: "/v1/audit", query: q}, &out); err != nil {
		return nil, err
	}
	rs := make([]audit.Record, 0, len(out.Entries))
	for i := range out.Entries {
		rs = append(rs, out.Entries[i].record())
	}
	return rs, nil
}

// Checkpoint signs a checkpoint of the head of scope of the key's tenant
// and stores it in the server's database, as [audit.Log.Checkpoint] (POST
// /v1/audit/checkpoints, admin scope). Keep a copy elsewhere: checkpoints
// kept outside the database are what reveal a database rolled back as a
// whole. A retry after a lost reply carries the same Idempotency-Key.
func (c *Client) Checkpoint(ctx context.Context, scope string) (audit.Checkpoint, error) {
	var out audit.Checkpoint
	err := c.do(ctx, call{method: "POST", path: "/v1/audit/checkpoints", body: map[string]any{"scope": scope}, idempotent: true}, &out)
	return out, err
}

// LatestCheckpoint returns the newest stored checkpoint of scope of the
// key's tenant, as [audit.Log.LatestCheckpoint] (GET
// /v1/audit/checkpoints/latest), or an error matching [racefree.ErrNotFound]
// when there is none.
func (c *Client) LatestCheckpoint(ctx context.Context, scope string) (audit.Checkpoint, error) {
	var out audit.Checkpoint
	err := c.do(ctx, call{method: "GET", path: "/v1/audit/checkpoints/latest", query: url.Values{"scope": {scope}}}, &out)
	return out, err
}
