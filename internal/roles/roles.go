// Package roles judges a PostgreSQL role by every role it can become: the
// one judgement of "does row-level security bind this role" that
// `racefree migrate up --app-role`, `racefree rls-check --role`, `racefree
// serve` (and tenant.Grant) share.
//
// A role escapes row-level security when it is, or can become, a
// superuser, a role with BYPASSRLS, or the owner of the tables the
// policies guard (an owner can ALTER TABLE … DISABLE ROW LEVEL SECURITY,
// and skips the policies of a table that does not FORCE them). A role
// that is, or can become, a role with CREATEROLE, or that has the rights
// of a predefined role reaching the server's files or programs
// (pg_read_server_files, pg_write_server_files,
// pg_execute_server_program), is not proven bound, and is a finding too:
// before PostgreSQL 16 CREATEROLE grants itself any role but a superuser
// (the owner among them); from 16 it administers the roles it created,
// which are not judged; and the server's files hold every tenant's rows.
// "Become"
// follows memberships, not only the role's own attributes:
//
//   - SET ROLE: before PostgreSQL 16 every membership, direct or through
//     other roles, INHERIT or NOINHERIT, lets the member SET ROLE to the
//     group, and then act with its attributes and privileges; from 16 on,
//     every grant of the chain must carry the SET option.
//   - INHERIT: a member that inherits (every role of the chain INHERIT
//     before 16; every grant WITH INHERIT TRUE from 16) has the group's
//     privileges without SET ROLE: an owner's among them, never its
//     attributes.
//   - From 16, SET ROLE then INHERIT: after SET ROLE to a role the member
//     has the privileges that role inherits, an owner's among them, though
//     it can neither SET ROLE to the owner nor inherit from it.
//   - From 16, ADMIN OPTION: a member that can use the privileges of a
//     role holding a grant WITH ADMIN OPTION can grant that role to
//     itself WITH SET TRUE, and so counts as able to SET ROLE to it,
//     whatever the SET and INHERIT options of that grant.
//
// PostgreSQL's own pg_has_role decides (MEMBER before 16, SET from 16,
// USAGE for privileges), and from 16 a walk over pg_auth_members adds the
// two ways pg_has_role does not answer (SET ROLE then INHERIT, ADMIN
// OPTION); the walk names the path of memberships for the message. The PostgreSQL 16 branch (set_option,
// inherit_option, pg_has_role … 'SET') is chosen by server_version_num;
// racefree's tests run on PostgreSQL 15 and prove it only against an
// emulation of PostgreSQL 16's catalogue (TestReach16OnEmulatedCatalogue).
//
// Not judged here: SECURITY DEFINER functions (rls-check looks at
// those).
package roles

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/racefree/racefree/internal/ident"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/statement"
)

//go:embed sql/postgres/reach.sql
var reachSQL string

//go:embed sql/postgres/reach16.sql
var reach16SQL string

//go:embed sql/postgres/owners.sql
var ownersSQL string

func init() {
	for _, q := range []*string{&reachSQL, &reach16SQL, &ownersSQL} {
		*q = query.Embedded(*q)
	}
}

// Kind names what a reachable role lets the judged role do. The strings
// are stable.
type Kind string

// The kinds of finding, from the worst.
const (
	// Superuser: a superuser is subject to no policy and may do anything.
	Superuser Kind = "superuser"
	// BypassRLS: a role with BYPASSRLS is subject to no policy.
	BypassRLS Kind = "bypassrls"
	// Owner: an owner of the guarded tables can disable their row-level
	// security, and skips policies that are not FORCEd.
	Owner Kind = "owner"
	// CreateRole: a role with CREATEROLE can create and grant roles:
	// before PostgreSQL 16 it can grant itself any role but a superuser
	// (the owner of the tables, a role with BYPASSRLS) and SET ROLE to it;
	// from 16 it administers the roles it created, which are not judged.
	// Either way row-level security is not proven to bind it. Like
	// SUPERUSER and BYPASSRLS it is an attribute: reached by SET ROLE only.
	CreateRole Kind = "createrole"
	// ServerFiles: pg_read_server_files, pg_write_server_files or
	// pg_execute_server_program (the Target) reach the server's files or
	// run programs as its operating-system user: the data files hold every
	// tenant's rows, and no policy guards them. Their rights come by SET
	// ROLE or, like an owner's, by INHERIT.
	ServerFiles Kind = "server-files"
)

// Code is the kind as `serve` reports it on /readyz and in the
// racefree_role_findings metric, and `doctor` as its code:
// role-is-superuser, role-bypasses-rls, role-owns-tables,
// role-creates-roles or role-reaches-server-files.
func (k Kind) Code() string {
	switch k {
	case Superuser:
		return "role-is-superuser"
	case BypassRLS:
		return "role-bypasses-rls"
	case CreateRole:
		return "role-creates-roles"
	case ServerFiles:
		return "role-reaches-server-files"
	}
	return "role-owns-tables"
}

// Kinds lists every Kind, from the worst.
var Kinds = []Kind{Superuser, BypassRLS, Owner, CreateRole, ServerFiles}

// Finding is one way the judged role escapes row-level security.
type Finding struct {
	Role   string // the role judged
	Kind   Kind
	Target string // the role that is a superuser, has BYPASSRLS or CREATEROLE, owns the tables or is a predefined role of the server's files: Role itself, or a role Role can become
	// Path is the chain of memberships from Role to Target, both
	// included: [Role] when Target is Role.
	Path []string
	// SetRole: Role can SET ROLE to Target and then act as it (always
	// true when Target is Role); from PostgreSQL 16 also when a role on
	// Path holds Target WITH ADMIN OPTION, so that Role can grant Target
	// to itself first.
	SetRole bool
	// Inherits: Role has Target's privileges without SET ROLE (INHERIT
	// all the way; always true when Target is Role). Only privileges are
	// inherited, never SUPERUSER or BYPASSRLS. Both SetRole and Inherits
	// are false for an owner or a predefined role whose privileges Role
	// has only after SET ROLE to a role on Path that inherits them
	// (PostgreSQL 16: SET, then INHERIT).
	Inherits bool
}

// Self reports whether the finding is about the role's own attributes or
// ownership, not a role it can become.
func (f Finding) Self() bool { return f.Target == f.Role }

// String is the finding in one line, names quoted as in SQL, e.g.
// `"app" can SET ROLE to "admins" (through "staff"), which has BYPASSRLS`.
func (f Finding) String() string {
	what := map[Kind]string{Superuser: "is a superuser", BypassRLS: "has BYPASSRLS", Owner: "owns the tables", CreateRole: "has CREATEROLE"}[f.Kind]
	if f.Kind == ServerFiles {
		what = map[string]string{
			"pg_read_server_files":      "reads the server's files",
			"pg_write_server_files":     "writes the server's files",
			"pg_execute_server_program": "runs programs on the server",
		}[f.Target]
	}
	if f.Self() {
		return quote(f.Role) + " " + what
	}
	how := "can SET ROLE to "
	if f.Kind == Owner || f.Kind == ServerFiles {
		switch {
		case f.Inherits:
			how = "has, without SET ROLE, the privileges of "
		case !f.SetRole:
			how = "has, after SET ROLE, the privileges of "
		}
	}
	through := ""
	if len(f.Path) > 2 {
		var mid []string
		for _, r := range f.Path[1 : len(f.Path)-1] {
			mid = append(mid, quote(r))
		}
		through = " (through " + strings.Join(mid, ", ") + ")"
	}
	return quote(f.Role) + " " + how + quote(f.Target) + through + ", which " + what
}

// Revoke is the SQL that cuts the path: the first membership on it. Empty
// when the finding is about the role itself.
func (f Finding) Revoke() string {
	if f.Self() || len(f.Path) < 2 {
		return ""
	}
	return fmt.Sprintf("REVOKE %s FROM %s;", quote(f.Path[1]), quote(f.Role))
}

// ErrNoRole is returned by Judge for a role that does not exist.
var ErrNoRole = errors.New("role does not exist")

// Querier reads the catalogue: a *sql.DB, *sql.Conn or *sql.Tx, or a
// racefree.Executor.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Judge returns every way role escapes row-level security on PostgreSQL,
// or is not proven bound by it: being, or being able to become (SET ROLE
// through any chain of memberships), a superuser, a role with BYPASSRLS
// or a role with CREATEROLE; being, being able to become, or having the
// privileges of (INHERIT) one of owners, the roles that own the tables
// the policies guard, or one of the predefined roles that reach the
// server's files or programs. Findings come ordered by Kind (Superuser,
// BypassRLS, Owner, CreateRole, ServerFiles), within a kind the role's own
// first, then by the reached role's name. A role that is itself a
// superuser gets the findings of its own BYPASSRLS and ownership only (it
// is every role's member, and its CREATEROLE adds nothing); a reached
// superuser that also has BYPASSRLS, CREATEROLE or owns the tables is
// reported as a superuser only. No
// finding means that row-level security binds role whatever role it
// SETs. It runs one catalogue query and changes nothing. ErrNoRole for a
// role that does not exist; q must be PostgreSQL.
func Judge(ctx context.Context, q Querier, role string, owners []string) ([]Finding, error) {
	if owners == nil {
		owners = []string{}
	}
	var version int
	if err := q.QueryRowContext(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return nil, fmt.Errorf("roles: server version: %w", err)
	}
	text := reachSQL
	if version >= 160000 {
		text = reach16SQL
	}
	return judge(ctx, q, text, role, owners)
}

// JudgeRacefree is Judge with the owners of racefree's tables where q's
// search path finds them (Owners) and alsoOwners as the owners: what `migrate up
// --app-role` (with the migrating role, which owns the tables the next
// migrations create, as alsoOwners), `serve` and `doctor` ask of a role.
func JudgeRacefree(ctx context.Context, q Querier, role string, alsoOwners ...string) ([]Finding, error) {
	owners, err := Owners(ctx, q)
	if err != nil {
		return nil, err
	}
	for _, o := range alsoOwners {
		if !slices.Contains(owners, o) {
			owners = append(owners, o)
		}
	}
	return Judge(ctx, q, role, owners)
}

// judge runs text, reach.sql or reach16.sql, and reads its rows.
func judge(ctx context.Context, q Querier, text, role string, owners []string) ([]Finding, error) {
	if owners == nil {
		owners = []string{}
	}
	rows, err := q.QueryContext(ctx, text, role, owners)
	if err != nil {
		return nil, fmt.Errorf("roles: judge %s: %w", quote(role), err)
	}
	var found []Finding
	exists := false
	for rows.Next() {
		var (
			name                      string
			self, super, bypass, owns bool
			createrole, files         bool
			canSet, inherits, acts    bool
			setPath, inheritPath      string
			actsPath                  string
		)
		if err := rows.Scan(&name, &self, &super, &bypass, &owns, &createrole, &files, &canSet, &inherits, &setPath, &inheritPath, &acts, &actsPath); err != nil {
			rows.Close()
			return nil, fmt.Errorf("roles: judge %s: %w", quote(role), err)
		}
		exists = exists || self
		f := Finding{Role: role, Target: name, SetRole: canSet || self, Inherits: inherits || self}
		var sp, ip, ap []string
		for _, p := range []struct {
			text string
			to   *[]string
		}{{setPath, &sp}, {inheritPath, &ip}, {actsPath, &ap}} {
			if err := json.Unmarshal([]byte(p.text), p.to); err != nil {
				rows.Close()
				return nil, fmt.Errorf("roles: path: %w", err)
			}
		}
		path := func(p []string) []string {
			switch {
			case self:
				return []string{role}
			case len(p) < 2:
				// A membership pg_auth_members does not list: name the
				// two ends.
				return []string{role, name}
			}
			return p
		}
		add := func(k Kind, p []string) {
			f.Kind, f.Path = k, path(p)
			found = append(found, f)
		}
		// privilege adds k for a privilege role holds whether it
		// inherits it, must SET ROLE to use it, or has it after SET ROLE
		// to a role that inherits it (16): the inheritance path where
		// there is one, since it needs no statement at all.
		privilege := func(k Kind) {
			switch {
			case f.Inherits:
				add(k, ip)
			case f.SetRole:
				add(k, sp)
			case acts:
				add(k, ap)
			}
		}
		if super && f.SetRole {
			add(Superuser, sp)
			if !self {
				continue // a superuser may do anything: nothing more to say
			}
		}
		if bypass && f.SetRole {
			add(BypassRLS, sp)
		}
		if owns {
			privilege(Owner)
		}
		if createrole && f.SetRole && !super {
			add(CreateRole, sp)
		}
		if files {
			privilege(ServerFiles)
		}
	}
	if err := statement.CloseRows(rows); err != nil {
		return nil, fmt.Errorf("roles: judge %s: %w", quote(role), err)
	}
	if !exists {
		return nil, fmt.Errorf("%w: %s", ErrNoRole, quote(role))
	}
	slices.SortStableFunc(found, func(a, b Finding) int {
		return slices.Index(Kinds, a.Kind) - slices.Index(Kinds, b.Kind)
	})
	return found, nil
}

// Owners returns the roles that own racefree's tables (racefree_%) in the
// schema where q's search path finds racefree's migration ledger, as
// racefree's own statements find its tables (not current_schema(), which
// is the role's own schema when one is named after it): none before the
// first migration.
func Owners(ctx context.Context, q Querier) ([]string, error) {
	rows, err := q.QueryContext(ctx, ownersSQL)
	if err != nil {
		return nil, fmt.Errorf("roles: owners: %w", err)
	}
	owners := []string{}
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			rows.Close()
			return nil, fmt.Errorf("roles: owners: %w", err)
		}
		owners = append(owners, o)
	}
	if err := statement.CloseRows(rows); err != nil {
		return nil, fmt.Errorf("roles: owners: %w", err)
	}
	return owners, nil
}

// quote quotes a role name read from the catalogue or checked by the
// caller.
func quote(name string) string {
	q, err := ident.Quote(name)
	if err != nil {
		return `"<invalid name>"`
	}
	return q
}
