package client

import (
	"context"
	"net/url"

	"github.com/racefree/racefree/audit"
)

// Verify verifies the chain of scope of the key's tenant on the server, as
// audit.Log.Verify (GET /v1/audit/verify), against the checkpoints stored
// in the server's database. A broken chain is a Result whose Break is set,
// not an error; the error is for what kept the server from deciding (a
// server without an audit keyring answers audit-unconfigured).
func (c *Client) Verify(ctx context.Context, scope string) (audit.Result, error) {
	var out audit.Result
	err := c.do(ctx, call{method: "GET", path: "/v1/audit/verify", query: url.Values{"scope": {scope}}}, &out)
	return out, err
}
