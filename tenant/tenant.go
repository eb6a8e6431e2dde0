package tenant

import (
	"context"
	"database/sql"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/send"
	"github.com/racefree/racefree/internal/tenantid"
)

const (
	// Default is the tenant of every call whose context names none, and of
	// every row written before tenancy (migration 011).
	Default = tenantid.Default
	// Setting is the PostgreSQL setting that holds the current
	// transaction's tenant. Policies read it with
	// NULLIF(current_setting('racefree.tenant_id', true), '').
	Setting = tenantid.Setting

	// MaxIDBytes bounds a tenant id.
	MaxIDBytes = tenantid.MaxIDBytes

	// TenantsVersion is the migration that adds the tenant columns (expand
	// only: the previous release keeps working against it).
	TenantsVersion = tenantid.TenantsVersion
	// KeysVersion is the migration that makes every key lead with the
	// tenant and turns on row-level security; tenants other than Default
	// need it.
	KeysVersion = tenantid.KeysVersion
)

// Check returns a *racefree.InputError unless id is a valid tenant id: 1 to
// 64 bytes of ASCII letters, digits, '-', '_', '.' and ':', starting with a
// letter or a digit (a UUID qualifies).
func Check(id string) error {
	return tenantid.Check(id)
}

// With returns a context whose racefree calls run for tenant id, or an
// InputError when id is invalid.
func With(ctx context.Context, id string) (context.Context, error) {
	return tenantid.With(ctx, id)
}

// From returns the tenant ctx names, or Default.
func From(ctx context.Context) string {
	return tenantid.From(ctx)
}

// MismatchError means a racefree call ran in a transaction set to another
// tenant than its context names.
type MismatchError = tenantid.MismatchError

// ErrMismatch matches every *MismatchError.
var ErrMismatch = tenantid.ErrMismatch

// InTx runs fn in a transaction of db ([racefree.DB.InTx]: IMMEDIATE on
// SQLite, retried on transient conflicts) that belongs to tenant id: on
// PostgreSQL the transaction's first statement is
// set_config('racefree.tenant_id', id, true), which ends with the
// transaction. fn's context names the tenant, so racefree calls made with
// it and tx run for that tenant without setting it again.
func InTx(ctx context.Context, db *racefree.DB, id string, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return send.InTx(ctx, db, id, fn)
}

// ReadTx runs fn in a transaction that belongs to tenant id and writes
// nothing, for a read route's several reads: on PostgreSQL a READ ONLY
// transaction ([racefree.DB.ReadTx]) whose first statement sets the tenant;
// the tenant is never recorded in the registry, so fn works on
// a standby. On SQLite fn runs on the pool (every racefree statement
// filters by the tenant there), so that a read never takes SQLite's
// write lock. fn's context names the tenant.
func ReadTx(ctx context.Context, db *racefree.DB, id string, fn func(ctx context.Context, exec racefree.Executor) error) error {
	return send.ReadTx(ctx, db, id, fn)
}

// Each runs fn once for every tenant racefree has seen (the tenant
// registry), with a context naming that tenant. Maintenance jobs (the
// reapers) use it: on PostgreSQL they see one tenant's rows at a time,
// like everyone else.
func Each(ctx context.Context, db *racefree.DB, fn func(ctx context.Context) error) error {
	return send.Each(ctx, db, fn)
}

// CheckDurable runs, in a read-only transaction that writes nothing, the
// check that begins every write of a DB with
// [racefree.Config.RequireSynchronousReplication] (set_strict.sql): it
// returns a *racefree.NotDurableError when a write would be refused now,
// with the reason, nil when a synchronous standby would wait for its
// commit, or the error that kept it from knowing. On SQLite, which has
// no standbys, it returns an *racefree.InputError. racefree doctor and
// serve's /readyz report it.
func CheckDurable(ctx context.Context, db *racefree.DB) error {
	return send.CheckDurable(ctx, db)
}
