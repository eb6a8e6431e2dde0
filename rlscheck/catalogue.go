package rlscheck

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/roles"
)

//go:embed sql/postgres/schemas.sql
var schemasSQL string

//go:embed sql/postgres/tables.sql
var tablesSQL string

//go:embed sql/postgres/policies.sql
var policiesSQL string

//go:embed sql/postgres/views.sql
var viewsSQL string

//go:embed sql/postgres/functions.sql
var functionsSQL string

func init() {
	for _, q := range []*string{&schemasSQL, &tablesSQL, &policiesSQL, &viewsSQL, &functionsSQL} {
		*q = query.Embedded(*q)
	}
}

type table struct {
	oid             int64
	schema, name    string
	enabled, forced bool
	colType, owner  string
	policies        []policy
	re              *nameRegexps // see nameRegexps
}

type policy struct {
	relid              int64
	name, cmd          string
	permissive         bool
	using, check       sql.NullString
	appliesToRole      bool
	usingExpr, chkExpr *exprFacts
}

type view struct {
	oid          int64
	schema, name string
	kind         string
	options      []string
	reads        []int64
}

type function struct {
	schema, name, args, kind, body string
	config                         []string
}

type catalogue struct {
	schemas   []string
	tables    []*table
	role      []roles.Finding // how Options.Role escapes row-level security (internal/roles)
	views     []*view
	functions []function
}

func readCatalogue(ctx context.Context, tx *sql.Tx, opts Options) (*catalogue, error) {
	cat := &catalogue{}
	rows, err := tx.QueryContext(ctx, schemasSQL, nonNil(opts.Schemas))
	if err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return nil, err
		}
		cat.schemas = append(cat.schemas, s)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("schemas: %w", err)
	}
	for _, s := range opts.Schemas {
		if !slices.Contains(cat.schemas, s) {
			return nil, racefree.Invalid("schema", "%q does not exist", s)
		}
	}

	rows, err = tx.QueryContext(ctx, tablesSQL, nonNil(cat.schemas), opts.TenantColumn)
	if err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}
	byOID := map[int64]*table{}
	for rows.Next() {
		t := &table{}
		if err := rows.Scan(&t.oid, &t.schema, &t.name, &t.enabled, &t.forced, &t.colType, &t.owner); err != nil {
			rows.Close()
			return nil, err
		}
		cat.tables = append(cat.tables, t)
		byOID[t.oid] = t
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("tables: %w", err)
	}

	// The role, judged by every role it can become: the tenant tables'
	// owners are the roles it must not be, become or inherit from.
	if opts.Role != "" {
		var owners []string
		for _, t := range cat.tables {
			if !slices.Contains(owners, t.owner) {
				owners = append(owners, t.owner)
			}
		}
		cat.role, err = roles.Judge(ctx, tx, opts.Role, owners)
		if errors.Is(err, roles.ErrNoRole) {
			return nil, racefree.Invalid("role", "%q does not exist", opts.Role)
		}
		if err != nil {
			return nil, fmt.Errorf("role: %w", err)
		}
	}

	rows, err = tx.QueryContext(ctx, policiesSQL, nonNil(cat.schemas), opts.Role)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	for rows.Next() {
		var p policy
		if err := rows.Scan(&p.relid, &p.name, &p.cmd, &p.permissive, &p.using, &p.check, &p.appliesToRole); err != nil {
			rows.Close()
			return nil, err
		}
		if t := byOID[p.relid]; t != nil {
			t.policies = append(t.policies, p)
		}
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}

	rows, err = tx.QueryContext(ctx, viewsSQL)
	if err != nil {
		return nil, fmt.Errorf("views: %w", err)
	}
	var last *view
	for rows.Next() {
		var v view
		var rel int64
		var options string
		if err := rows.Scan(&v.oid, &v.schema, &v.name, &v.kind, &options, &rel); err != nil {
			rows.Close()
			return nil, err
		}
		if err := json.Unmarshal([]byte(options), &v.options); err != nil {
			rows.Close()
			return nil, fmt.Errorf("view %s options: %w", v.name, err)
		}
		if byOID[rel] == nil {
			continue
		}
		if last == nil || last.oid != v.oid {
			last = &v
			cat.views = append(cat.views, last)
		}
		last.reads = append(last.reads, rel)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("views: %w", err)
	}

	rows, err = tx.QueryContext(ctx, functionsSQL)
	if err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	for rows.Next() {
		var f function
		var oid int64
		var args, body sql.NullString
		var config string
		if err := rows.Scan(&oid, &f.schema, &f.name, &args, &f.kind, &body, &config); err != nil {
			rows.Close()
			return nil, err
		}
		if !args.Valid {
			continue // dropped since the snapshot: catalogue functions read the latest catalogue
		}
		f.args, f.body = args.String, body.String
		if err := json.Unmarshal([]byte(config), &f.config); err != nil {
			rows.Close()
			return nil, fmt.Errorf("function %s config: %w", f.name, err)
		}
		f.body = body.String
		cat.functions = append(cat.functions, f)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("functions: %w", err)
	}
	return cat, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func closeRows(rows *sql.Rows) error {
	err := rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}
