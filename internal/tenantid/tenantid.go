// Package tenantid is the tenant a context names, and the checks on a
// tenant id: what package tenant and the sending of statements
// (internal/send) both need, in a package that needs neither.
package tenantid

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/racefree/racefree"
)

const (
	// Default is the tenant of every call whose context names none, and of
	// every row written before tenancy (migration 011).
	Default = "default"
	// Setting is the PostgreSQL setting that holds the current
	// transaction's tenant. Policies read it with
	// NULLIF(current_setting('racefree.tenant_id', true), '').
	Setting = "racefree.tenant_id"

	// MaxIDBytes bounds a tenant id.
	MaxIDBytes = 64

	// TenantsVersion is the migration that adds the tenant columns (expand
	// only: the previous release keeps working against it).
	TenantsVersion = 11
	// KeysVersion is the migration that makes every key lead with the
	// tenant and turns on row-level security; tenants other than Default
	// need it.
	KeysVersion = 12
)

// Check returns a *racefree.InputError unless id is a valid tenant id: 1 to
// 64 bytes of ASCII letters, digits, '-', '_', '.' and ':', starting with a
// letter or a digit (a UUID qualifies).
func Check(id string) error {
	if id == "" {
		return racefree.Invalid("tenant", "must not be empty")
	}
	if len(id) > MaxIDBytes {
		return racefree.Invalid("tenant", "must be at most %d bytes", MaxIDBytes)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '-' || c == '_' || c == '.' || c == ':'):
		default:
			return racefree.Invalid("tenant", "must be ASCII letters, digits, '-', '_', '.' or ':', starting with a letter or digit")
		}
	}
	return nil
}

type ctxKey struct{}

// bound is what a context carries: the tenant, and the transaction InTx
// already set it in (nil when none).
type bound struct {
	id string
	tx *sql.Tx
}

// With returns a context whose racefree calls run for tenant id, or an
// InputError when id is invalid.
func With(ctx context.Context, id string) (context.Context, error) {
	if err := Check(id); err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, ctxKey{}, bound{id: id}), nil
}

// From returns the tenant ctx names, or Default.
func From(ctx context.Context) string {
	if b, ok := ctx.Value(ctxKey{}).(bound); ok {
		return b.id
	}
	return Default
}

// MismatchError means a racefree call ran in a transaction set to another
// tenant than its context names.
type MismatchError struct {
	Tx, Context string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("racefree: the transaction belongs to tenant %q, the call to tenant %q", e.Tx, e.Context)
}

// ErrMismatch matches every *MismatchError.
var ErrMismatch = errors.New("racefree: transaction and call belong to different tenants")

// Is matches ErrMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// WithTx returns a context that names tenant id, and tx as the
// transaction that InTx (or ReadTx) already set to it: calls made with
// that context and tx need not set it again. id must be valid (Check).
func WithTx(ctx context.Context, id string, tx *sql.Tx) context.Context {
	return context.WithValue(ctx, ctxKey{}, bound{id: id, tx: tx})
}

// Tx returns the transaction ctx says its tenant is set in, or nil.
func Tx(ctx context.Context) *sql.Tx {
	b, _ := ctx.Value(ctxKey{}).(bound)
	return b.tx
}
