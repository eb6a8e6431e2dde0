// Package apikey issues and verifies the API keys of racefree's HTTP
// server: each key belongs to one tenant and grants scopes (read, write,
// admin), so that a request's tenant comes from its credential and from
// nothing the client could set otherwise.
//
// A key reads rfk_<tenant>_<id>_<secret>: the tenant and the key's id in
// clear, so that it is looked up under that tenant's row-level security by
// primary key, and a secret of 256 random bits. Only the SHA-256 of the
// secret is stored (racefree_keys.hash); Create returns the text once.
// Verify compares the SHA-256 of the presented secret with the stored one
// in constant time (crypto/subtle), costs the same comparison when the id
// is unknown, and refuses a revoked key. A refusal costs the same
// statements for a tenant that exists as for one that does not
// (one read that never registers a tenant), so timing refusals does not list the tenants.
//
// Revocation reaches every instance within one second: Verify caches a
// verified key for at most MaxCacheTTL (DefaultCacheTTL, 500ms), and
// nothing else. Text that is not a well-formed key is ErrMalformed and
// touches no table; a well-formed key of a tenant racefree never saw is
// ErrRefused without registering that tenant.
//
// Every statement runs for the key's tenant: Create and Revoke in
// tenant.InTx, Verify and List in the tenant's own setting (package tenant). The application role that
// `racefree serve` logs in as may only read keys (tenant.Grant); create,
// list and revoke them as the owner, with `racefree keys`.
package apikey
