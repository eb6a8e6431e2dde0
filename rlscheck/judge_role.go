package rlscheck

import (
	"fmt"
	"strings"

	"github.com/racefree/racefree/internal/roles"
)

// judgeRole reports the role's own SUPERUSER and BYPASSRLS
// (role_bypasses_rls), every role it can SET ROLE to that is a
// superuser, has BYPASSRLS or owns a tenant table without passing its
// privileges on (role_can_become_*), CREATEROLE of its own or of a role it
// can SET ROLE to (role_can_create_roles), and the rights of a predefined
// role of the server's files or programs (role_reaches_server_files),
// each with the path of memberships (internal/[roles.Judge]). Owners whose privileges the role has come per
// table from judgeOwnerPrivileges.
func (cat *catalogue) judgeRole(rep *Report, opts Options) {
	if opts.Role == "" {
		return
	}
	role := quote(opts.Role)
	var what, fix []string
	for _, f := range cat.role {
		if !f.Self() {
			continue
		}
		switch f.Kind {
		case roles.Superuser:
			what, fix = append(what, "a superuser"), append(fix, "NOSUPERUSER")
		case roles.BypassRLS:
			what, fix = append(what, "BYPASSRLS"), append(fix, "NOBYPASSRLS")
		}
	}
	if len(what) > 0 {
		rep.add(RoleBypassesRLS, "role "+role,
			fmt.Sprintf("the application role is %s: no policy applies to it, so it sees and changes every tenant's rows", strings.Join(what, " and ")),
			fmt.Sprintf("ALTER ROLE %s %s;", role, strings.Join(fix, " ")))
	}
	for _, f := range cat.role {
		switch f.Kind {
		case roles.CreateRole:
			fix := f.Revoke()
			if f.Self() {
				fix = fmt.Sprintf("ALTER ROLE %s NOCREATEROLE;", role)
			}
			rep.add(RoleCanCreateRoles, "role "+role,
				fmt.Sprintf("%s: it can create and grant roles (before PostgreSQL 16 any role but a superuser, a tenant table's owner among them), so no policy is proven to bind it", f), fix)
			continue
		case roles.ServerFiles:
			rep.add(RoleReachesServerFiles, "role "+role,
				fmt.Sprintf("%s: the server's files hold every tenant's rows, and no policy guards them", f), f.Revoke())
			continue
		}
		if f.Self() {
			continue
		}
		switch f.Kind {
		case roles.Superuser:
			rep.add(RoleCanBecomeSuperuser, "role "+role,
				fmt.Sprintf("%s: after SET ROLE %s no policy applies, so it sees and changes every tenant's rows", f, quote(f.Target)), f.Revoke())
		case roles.BypassRLS:
			rep.add(RoleCanBecomeBypassRLS, "role "+role,
				fmt.Sprintf("%s: after SET ROLE %s no policy applies, so it sees and changes every tenant's rows", f, quote(f.Target)), f.Revoke())
		case roles.Owner:
			if f.Inherits {
				continue // judgeOwnerPrivileges, per table
			}
			var owned []string
			for _, t := range cat.tables {
				if t.owner == f.Target {
					owned = append(owned, quote(t.schema)+"."+quote(t.name))
				}
			}
			after := "after SET ROLE " + quote(f.Target)
			if !f.SetRole {
				// PostgreSQL 16: SET ROLE to a role on the path that
				// inherits the owner's privileges.
				after = "after SET ROLE to a role on that path"
			}
			rep.add(RoleCanBecomeOwner, "role "+role,
				fmt.Sprintf("%s %s: %s it can disable their RLS", f, strings.Join(owned, ", "), after), f.Revoke())
		}
	}
}

// judgeOwnerPrivileges reports role_owns_table on t when the role owns it
// or has its owner's privileges without SET ROLE (INHERIT).
func (cat *catalogue) judgeOwnerPrivileges(rep *Report, t *table, name string, opts Options) {
	role := quote(opts.Role)
	for _, f := range cat.role {
		if f.Kind != roles.Owner || !f.Inherits || f.Target != t.owner {
			continue
		}
		if f.Self() {
			rep.add(RoleOwnsTable, name, fmt.Sprintf("the application role %s owns the table: it can disable its RLS, and skips the policies unless RLS is forced", role),
				fmt.Sprintf("ALTER TABLE %s OWNER TO migration_owner; -- a role the application does not log in as", name))
		} else {
			rep.add(RoleOwnsTable, name, fmt.Sprintf("the application role %s has the privileges of the owner %s: it can disable the table's RLS, and skips the policies unless RLS is forced", role, quote(t.owner)),
				f.Revoke())
		}
	}
}
