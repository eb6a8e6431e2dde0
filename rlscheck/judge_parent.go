package rlscheck

import (
	"fmt"
	"strings"
)

// judgeParent reports a parent of tenant tables (parents.sql) that does not
// deny the application every row: a query on it reads the children's rows
// under its own policies alone, so only a parent that admits nothing keeps
// them apart. What it lacks is said in one finding, with the SQL that makes
// it deny; its owner is judged as a tenant table's owner is.
func (cat *catalogue) judgeParent(rep *Report, p *parent, opts Options) {
	name := cat.reach[p.oid]
	children := make([]string, 0, len(p.children))
	for _, oid := range p.children {
		children = append(children, cat.reach[oid])
	}
	var lacks, fix []string
	if !p.enabled {
		lacks = append(lacks, "row-level security is not enabled")
		fix = append(fix, fmt.Sprintf("ALTER TABLE %s ENABLE ROW LEVEL SECURITY;", name))
	}
	if !p.forced {
		lacks = append(lacks, fmt.Sprintf("row-level security is not forced (its owner %s skips it)", quote(p.owner)))
		fix = append(fix, fmt.Sprintf("ALTER TABLE %s FORCE ROW LEVEL SECURITY;", name))
	}
	for _, pol := range p.policies {
		if pol.permissive && pol.appliesToRole {
			lacks = append(lacks, fmt.Sprintf("permissive policy %s admits rows", quote(pol.name)))
			fix = append(fix, fmt.Sprintf("DROP POLICY %s ON %s;", quote(pol.name), name))
		}
	}
	if len(lacks) > 0 {
		rep.add(ParentNotDenied, name,
			fmt.Sprintf("parent of tenant table %s by inheritance: a query on it reads their rows under its own policies only, and it does not deny them: %s",
				strings.Join(children, ", "), strings.Join(lacks, "; ")),
			strings.Join(fix, " ")+" -- with no policy for the application the parent denies it every row; read the children by name, or give the parent the tenant column and a tenant policy")
	}
	cat.judgeOwnerPrivileges(rep, &p.table, name, opts)
}
