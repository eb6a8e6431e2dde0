// Package tenant isolates racefree's data, and the application's own, by
// tenant, with the database as the referee.
//
// Every racefree table carries a tenant column that leads each of its keys,
// so no unique constraint can reveal another tenant's row. Every racefree
// call runs for the tenant its context names (With; Default when none),
// and every racefree statement filters by it.
//
// On PostgreSQL (migration 012) every racefree table also has row-level
// security ENABLED and FORCED (the table owner obeys it too), with one
// policy per table:
//
//	tenant = (SELECT NULLIF(current_setting('racefree.tenant_id', true), ''))
//
// InTx sets that setting with set_config(…, true), scoped to the
// transaction, so it is safe behind a transaction-mode pooler and never
// leaks to the next user of a pooled connection. A transaction that set no
// tenant sees no row and writes none. The application's own tables can use
// the same setting in their policies (docs/tenants.md).
//
// racefree calls made with a *sql.DB or *racefree.DB run in a short
// transaction of their own that sets the tenant. A call that is a single
// statement (a claim's Acquire, say) sends set_config(…, true) and the statement
// in one round trip, as one implicit transaction (a pipeline):
// it costs what the statement alone cost before tenancy, give or take the
// setting. Calls of several statements send BEGIN, the setting, the
// statements and COMMIT. A role that row-level security does not
// bind (a superuser or BYPASSRLS; checked once per DB) needs neither: its
// calls run as they did before tenancy, guarded by their statements'
// tenant filter alone. A call made in the
// caller's own *sql.Tx sets the tenant there when the transaction has none,
// and fails with a *MismatchError when the transaction is set to another
// tenant: one transaction belongs to one tenant.
//
// SQLite has no row-level security: the tenant column and the filter in
// every statement keep tenants apart there, through the same API.
//
// Failure modes: an empty or malformed tenant id is a *racefree.InputError;
// a tenant other than Default before migration 012 is ErrSchemaOutdated
// (until then the previous release's keys, which do not lead with the
// tenant, are still in place); any call before migration 011 is
// ErrSchemaOutdated.
package tenant
