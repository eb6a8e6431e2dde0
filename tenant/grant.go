package tenant

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/ident"
	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/schema"
)

// privileges lists what the application role needs on each racefree table:
// the audit log and its checkpoints are append-only, the registry only
// grows, keys are only read (they are managed with the owner's `racefree
// keys`), and the schema version is only read.
var privileges = []struct{ table, privs string }{
	{"racefree_schema_migrations", "SELECT"},
	{"racefree_tenants", "SELECT, INSERT"},
	{"racefree_keys", "SELECT"},
	{"racefree_claims", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_claim_floors", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_dedup_events", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_idempotency", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_idempotency_steps", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_inbox_sources", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_inbox", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_sequences", "SELECT, INSERT, UPDATE"},
	{"racefree_audit_heads", "SELECT, INSERT, UPDATE"},
	{"racefree_audit", "SELECT, INSERT"},
	{"racefree_audit_checkpoints", "SELECT, INSERT"},
	{"racefree_quotas", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_quota_ledger", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_onetime_codes", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_refresh_families", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_refresh_retired", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_outbox", "SELECT, INSERT, UPDATE, DELETE"},
	{"racefree_outbox_attempts", "SELECT, INSERT, DELETE"},
}

// ErrUnsafeRole means a role cannot serve as the application role: it is,
// or can become, a role that row-level security does not bind (a
// superuser, a role with BYPASSRLS, the owner of racefree's tables or the
// role granting), any of which would let it read every tenant's rows, or
// that it is not proven to bind (a role with CREATEROLE, the predefined
// roles of the server's files or programs).
var ErrUnsafeRole = errors.New("racefree: role would bypass row-level security")

// CheckAppRole judges role as the application role of db (PostgreSQL, as
// the role that owns or will own racefree's tables): it must not be, nor
// be able to become by SET ROLE through any chain of memberships, a
// superuser or a role with BYPASSRLS, and must neither be, become nor
// inherit the privileges of the owner of racefree's tables or the role
// db logs in as (which owns the tables that the next migrations create);
// nor have, or SET ROLE to a role with, CREATEROLE, nor have the rights of
// pg_read_server_files, pg_write_server_files or
// pg_execute_server_program (internal/roles). It refuses such a role with ErrUnsafeRole and one line naming the path
// and the REVOKE that cuts it, an unknown or malformed role and SQLite
// with an InputError. It only reads the catalogue; Grant runs it first.
func CheckAppRole(ctx context.Context, db *racefree.DB, role string) error {
	if db.Engine() != racefree.Postgres {
		return racefree.Invalid("app-role", "roles exist on PostgreSQL only")
	}
	return checkAppRole(ctx, db, role)
}

func checkAppRole(ctx context.Context, q roles.Querier, role string) error {
	if _, err := ident.Quote(role); err != nil {
		return racefree.Invalid("app-role", "%v", err)
	}
	var me string
	if err := q.QueryRowContext(ctx, `SELECT current_user`).Scan(&me); err != nil {
		return fmt.Errorf("read current user: %w", err)
	}
	found, err := roles.JudgeRacefree(ctx, q, role, me)
	if errors.Is(err, roles.ErrNoRole) {
		return racefree.Invalid("app-role", "role %q does not exist", role)
	}
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return nil
	}
	msg := found[0].String()
	if fix := found[0].Revoke(); fix != "" {
		msg += " (" + strings.TrimSuffix(fix, ";") + " cuts it)"
	}
	if len(found) > 1 {
		msg += fmt.Sprintf(", and %d more way(s)", len(found)-1)
	}
	return fmt.Errorf("%w: %s", ErrUnsafeRole, msg)
}

// Grant gives role exactly the privileges racefree's calls need on its
// tables in the current schema (PostgreSQL, schema at KeysVersion or
// later), and USAGE on that schema. It first refuses, as CheckAppRole
// does, a role that does not exist and a role that is or can become a
// role row-level security does not bind (ErrUnsafeRole): a superuser, a
// role with BYPASSRLS, the owner of the tables or the role running the
// migrations, a role with CREATEROLE or a predefined role of the server's
// files or programs, itself or by SET ROLE through its memberships (or,
// for an owner or a predefined role, by inheriting its privileges).
// Granting twice is harmless.
func Grant(ctx context.Context, db *racefree.DB, role string) error {
	if db.Engine() != racefree.Postgres {
		return racefree.Invalid("app-role", "roles exist on PostgreSQL only")
	}
	quoted, err := ident.Quote(role)
	if err != nil {
		return racefree.Invalid("app-role", "%v", err)
	}
	if err := schema.Need(ctx, db, db, KeysVersion); err != nil {
		return err
	}
	return db.InTx(ctx, func(tx *sql.Tx) error {
		if err := checkAppRole(ctx, tx, role); err != nil {
			return err
		}
		var schema string
		if err := tx.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return fmt.Errorf("read schema: %w", err)
		}
		qs, err := ident.Quote(schema)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "GRANT USAGE ON SCHEMA "+qs+" TO "+quoted); err != nil {
			return fmt.Errorf("grant usage: %w", err)
		}
		// GRANT only warns when the granting role cannot grant USAGE on
		// a schema it does not own: check that the role has it.
		var usage bool
		if err := tx.QueryRowContext(ctx, `SELECT has_schema_privilege($1, $2, 'USAGE')`, role, schema).Scan(&usage); err != nil {
			return fmt.Errorf("check usage: %w", err)
		}
		if !usage {
			return fmt.Errorf("racefree: %q has no USAGE on schema %s, and this role cannot grant it: run GRANT USAGE ON SCHEMA %s TO %s as the schema's owner", role, qs, qs, quoted)
		}
		for _, p := range privileges {
			// A table of a later migration than the schema's (migrate up
			// --to N --app-role) is granted by the next migrate up --app-role.
			var exists bool
			if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, qs+"."+p.table).Scan(&exists); err != nil {
				return fmt.Errorf("look for %s: %w", p.table, err)
			}
			if !exists {
				continue
			}
			// Table names and privileges are constants; the role is quoted.
			if _, err := tx.ExecContext(ctx, "GRANT "+p.privs+" ON "+qs+"."+p.table+" TO "+quoted); err != nil {
				return fmt.Errorf("grant on %s: %w", p.table, err)
			}
		}
		return nil
	})
}
