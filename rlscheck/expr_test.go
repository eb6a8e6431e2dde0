package rlscheck

import (
	"database/sql"
	"strings"
	"testing"
)

// TestAnalyze reads policy expressions as pg_get_expr prints them (and as
// people write them) and checks what each does with the setting.
func TestAnalyze(t *testing.T) {
	t.Parallel()
	const s = "racefree.tenant_id"
	for _, c := range []struct {
		expr string
		want exprFacts
	}{
		{`(tenant_id = (NULLIF(current_setting('racefree.tenant_id'::text, true), ''::text))::uuid)`, exprFacts{settingRefs: 1, proven: true}},
		{`tenant_id = NULLIF(pg_catalog.current_setting('RaceFree.Tenant_ID', 'on'::boolean), '')::bigint`, exprFacts{settingRefs: 1, proven: true}},
		{`(tenant_id = NULLIF(current_setting('racefree.tenant_id', true), ''))`, exprFacts{settingRefs: 1, proven: true}},
		{`(owner_id = current_user)`, exprFacts{}},
		{`(tenant_id = app.current_tenant())`, exprFacts{}},
		{`(tenant_id = NULLIF(current_setting('other.tenant_id', true), ''))`, exprFacts{}},
		{`(tenant_id = NULLIF(myschema.current_setting('racefree.tenant_id', true), ''))`, exprFacts{}},
		{`(tenant_id = (current_setting('racefree.tenant_id'::text))::uuid)`, exprFacts{settingRefs: 1, noMissingOK: true, noNullIf: true}},
		{`(tenant_id = NULLIF(current_setting('racefree.tenant_id'), ''))`, exprFacts{settingRefs: 1, noMissingOK: true}},
		{`(tenant_id = NULLIF(current_setting('racefree.tenant_id', false), ''))`, exprFacts{settingRefs: 1, noMissingOK: true}},
		{`(tenant_id = current_setting('racefree.tenant_id', true))`, exprFacts{settingRefs: 1, noNullIf: true}},
		{`(tenant_id = NULLIF(current_setting('racefree.tenant_id', true), 'x'))`, exprFacts{settingRefs: 1, noNullIf: true}},
		{`(tenant_id = NULLIF('', current_setting('racefree.tenant_id', true)))`, exprFacts{settingRefs: 1, noNullIf: true}},
		{`(tenant_id = (lower(NULLIF(current_setting('racefree.tenant_id', true), ''))))`, exprFacts{settingRefs: 1}},
		{`(tenant_id = NULLIF(lower(current_setting('racefree.tenant_id', true)), ''))`, exprFacts{settingRefs: 1, noNullIf: true}},
		{`(tenant_id = COALESCE((NULLIF(current_setting('racefree.tenant_id'::text, true), ''::text))::uuid, tenant_id))`, exprFacts{settingRefs: 1, coalesced: true}},
		{`(tenant_id = COALESCE(current_setting('racefree.tenant_id', true), ''))`, exprFacts{settingRefs: 1, noNullIf: true, coalesced: true}},
		{`true`, exprFacts{alwaysTrue: true}},
		{`'t'::boolean`, exprFacts{alwaysTrue: true}},
		{`'t'::"boolean"`, exprFacts{}},
		{`'t'::public.bool`, exprFacts{}},
		{`(tenant_id = NULLIF(current_setting('racefree.tenant_id', 'on'::"boolean"), ''))`, exprFacts{settingRefs: 1, noMissingOK: true}},
		{`false`, exprFacts{}},
		{`(1 = 1)`, exprFacts{alwaysTrue: true}},
		{`(1 = 2)`, exprFacts{}},
		{`(('a'::text = 'a'::text) OR false)`, exprFacts{alwaysTrue: true}},
		{`((tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')) OR true)`, exprFacts{settingRefs: 1, alwaysTrue: true}},
		{`((a = 1) OR ((b = 2) OR true))`, exprFacts{alwaysTrue: true}},
		{`((tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')) AND ((a = 1) OR true))`, exprFacts{settingRefs: 1, proven: true}},
		{`(true AND true)`, exprFacts{alwaysTrue: true}},
	} {
		got, err := analyze(sql.NullString{String: c.expr, Valid: true}, s, "tenant_id", "uuid")
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if *got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.expr, *got, c.want)
		}
	}
	if f, err := analyze(sql.NullString{}, s, "tenant_id", "uuid"); f != nil || err != nil {
		t.Errorf("no expression: %v, %v", f, err)
	}
	if _, err := analyze(sql.NullString{String: "tenant_id = (", Valid: true}, s, "tenant_id", "uuid"); err == nil {
		t.Error("an expression that does not parse: no error")
	}
}

func TestSecurityInvoker(t *testing.T) {
	t.Parallel()
	for opts, want := range map[string]bool{
		"security_invoker=true": true, "security_invoker=on": true, "security_invoker=1": true, "security_invoker=yes": true,
		"security_invoker=false": false, "security_invoker=off": false, "security_invoker=0": false,
		"check_option=local": false, "": false,
	} {
		if got := securityInvoker([]string{opts}); got != want {
			t.Errorf("%q: %v, want %v", opts, got, want)
		}
	}
}

// TestProves: a policy expression is proven only when every row it admits
// has the tenant column equal to the guarded setting. The expressions are
// as people write them and as pg_get_expr prints them.
func TestProves(t *testing.T) {
	t.Parallel()
	const g = `NULLIF(current_setting('racefree.tenant_id', true), '')`
	for _, c := range []struct {
		expr    string
		colType string // default uuid
		want    bool
	}{
		// proven
		{expr: `tenant_id = ` + g + `::uuid`, want: true},
		{expr: g + `::uuid = tenant_id`, want: true},
		{expr: `(((NULLIF(current_setting('racefree.tenant_id'::text, true), ''::text))::uuid = tenant_id))`, want: true},
		{expr: `((tenant_id)::text = NULLIF(current_setting('racefree.tenant_id'::text, true), ''::text))`, want: true},
		{expr: `tenant_id::text = ` + g + `::text`, want: true},
		{expr: `tenant_id::varchar = ` + g, want: true},
		{expr: `tenant_id = ` + g + `::uuid AND id > 0 AND NOT archived`, want: true},
		{expr: `(id > 0 OR archived) AND tenant_id = ` + g + `::uuid`, want: true},
		{expr: `(tenant_id = ` + g + `::uuid AND a) OR (b AND ` + g + `::uuid = tenant_id)`, want: true},
		{expr: `(tenant_id = ` + g + `::uuid OR tenant_id = ` + g + `::uuid) AND x`, want: true},
		{expr: `(tenant_id = (( SELECT NULLIF(current_setting('racefree.tenant_id'::text, true), ''::text) AS "nullif"))::uuid)`, want: true},
		{expr: `tenant = (SELECT ` + g + `)`, want: false}, // another column
		{expr: `tenant_id OPERATOR(pg_catalog.=) ` + g + `::uuid`, want: true},
		{expr: `(tenant_id)::bigint = ` + g + `::bigint`, colType: "integer", want: true},
		{expr: `(tenant_id = ` + g + `::uuid)::boolean`, want: true},
		{expr: `(tenant_id = ` + g + `::uuid)::pg_catalog.bool`, want: true},
		{expr: `tenant_id = NULLIF(current_setting('racefree.tenant_id', true)::text, '')::uuid`, want: true},
		// not proven
		{expr: `tenant_id <> ` + g + `::uuid`},
		{expr: `tenant_id IS NOT DISTINCT FROM ` + g + `::uuid`},
		{expr: `current_setting('racefree.tenant_id', true) IS NOT NULL`},
		{expr: g + ` IS NOT NULL`},
		{expr: `tenant_id = ` + g + `::uuid OR current_setting('racefree.tenant_id', true) IS NULL`},
		{expr: `tenant_id = ` + g + `::uuid OR ` + g + ` IS NULL`},
		{expr: `tenant_id = ` + g + `::uuid OR 1 = 1`},
		{expr: `tenant_id = ` + g + `::uuid OR id > 0`},
		{expr: `tenant_id = ` + g + `::uuid OR true`},
		{expr: `tenant_id = ` + g + `::uuid OR 2 > 1`},
		{expr: `tenant_id::text LIKE ` + g + ` || '%'`},
		{expr: `tenant_id::text LIKE ` + g},
		{expr: `tenant_id = tenant_id`},
		{expr: `other_id = ` + g + `::uuid`},
		{expr: `t.tenant_id = ` + g + `::uuid`},
		{expr: `NOT (tenant_id <> ` + g + `::uuid)`},
		{expr: `NOT NOT (tenant_id = ` + g + `::uuid)`},
		{expr: `tenant_id IN (` + g + `::uuid)`},
		{expr: `tenant_id = ANY (ARRAY[` + g + `::uuid])`},
		{expr: `CASE WHEN true THEN tenant_id = ` + g + `::uuid END`},
		{expr: `lower(tenant_id::text) = ` + g},
		{expr: `tenant_id = lower(` + g + `)::uuid`},
		{expr: `tenant_id = COALESCE(` + g + `::uuid, tenant_id)`},
		{expr: `tenant_id = current_setting('racefree.tenant_id', true)::uuid`},
		{expr: `tenant_id = NULLIF(current_setting('racefree.tenant_id'), '')::uuid`},
		{expr: `tenant_id = NULLIF(current_setting('racefree.tenant_id', false), '')::uuid`},
		{expr: `tenant_id = NULLIF(current_setting('other.tenant_id', true), '')::uuid`},
		{expr: `tenant_id = NULLIF(current_setting('racefree.tenant_id', true), 'x')::uuid`},
		{expr: `tenant_id::varchar(3) = ` + g, colType: "text"},
		{expr: `tenant_id = ` + g + `::varchar(3)`, colType: "text"},
		{expr: `tenant_id = ` + g + `::"char"`, colType: "text"},
		{expr: `tenant_id::uuid = ` + g + `::uuid`, colType: "text"},
		{expr: `tenant_id::integer = ` + g + `::integer`, colType: "numeric"},
		{expr: `tenant_id = (SELECT ` + g + ` FROM other)::uuid`},
		{expr: `tenant_id = (SELECT ` + g + ` LIMIT 1)::uuid`},
		{expr: `tenant_id = (SELECT tenant_id FROM tenants WHERE name = ` + g + `)`},
		{expr: `tenant_id = app.tenant()`},
		{expr: `tenant_id = ` + g + `::uuid COLLATE "C"`},
		{expr: `(tenant_id = ` + g + `::uuid) IS TRUE`},
		// casts to a type of the user's, whose cast to boolean may be
		// anything (pg_get_expr prints PostgreSQL's own as boolean)
		{expr: `(((tenant_id = ` + g + `::uuid))::verdict)::boolean`},
		{expr: `((tenant_id = ` + g + `::uuid))::verdict`},
		{expr: `((tenant_id = ` + g + `::uuid))::"boolean"`},
		{expr: `((tenant_id = ` + g + `::uuid))::public.bool`},
		{expr: `((tenant_id = ` + g + `::uuid))::bool`},
		{expr: `(((tenant_id = ` + g + `::uuid))::text)::boolean`},
		{expr: `(((tenant_id = ` + g + `::uuid))::integer)::boolean`},
		{expr: `tenant_id = ` + g + `::uuid OR (tenant_id = ` + g + `::uuid AND false) OR archived`},
		{expr: `true`},
		{expr: `false`}, // admits nothing, but proves nothing either: reported, as USING (false) is a policy left half written
	} {
		col := c.colType
		if col == "" {
			col = "uuid"
		}
		f, err := analyze(sql.NullString{String: c.expr, Valid: true}, "racefree.tenant_id", "tenant_id", col)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if f.proven != c.want {
			t.Errorf("%s (%s): proven %v, want %v", c.expr, col, f.proven, c.want)
		}
	}
}

func TestPlpgsqlQuery(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode float64
		q    string
		want string
	}{
		{0, "SELECT count(*) FROM orders", "SELECT count(*) FROM orders"},
		{2, "x > 0", "SELECT  x > 0"},
		{3, "x := (SELECT count(*) FROM orders)", "SELECT  (SELECT count(*) FROM orders)"},
		{3, "x = 1", "SELECT  1"},
	} {
		got, err := plpgsqlQuery(map[string]any{"query": c.q, "parseMode": c.mode})
		if err != nil || strings.Join(strings.Fields(got), " ") != strings.Join(strings.Fields(c.want), " ") {
			t.Errorf("%v %q: %q, %v; want %q", c.mode, c.q, got, err, c.want)
		}
	}
	if _, err := plpgsqlQuery(map[string]any{"query": "int", "parseMode": float64(1)}); err == nil {
		t.Error("a type name: no error")
	}
}
