package rlscheck

import (
	"database/sql"
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
		{`(tenant_id = (NULLIF(current_setting('racefree.tenant_id'::text, true), ''::text))::uuid)`, exprFacts{settingRefs: 1}},
		{`tenant_id = NULLIF(pg_catalog.current_setting('RaceFree.Tenant_ID', 'on'::boolean), '')::bigint`, exprFacts{settingRefs: 1}},
		{`(tenant_id = NULLIF(current_setting('racefree.tenant_id', true), ''))`, exprFacts{settingRefs: 1}},
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
		{`false`, exprFacts{}},
		{`(1 = 1)`, exprFacts{alwaysTrue: true}},
		{`(1 = 2)`, exprFacts{}},
		{`(('a'::text = 'a'::text) OR false)`, exprFacts{alwaysTrue: true}},
		{`((tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')) OR true)`, exprFacts{settingRefs: 1, alwaysTrue: true}},
		{`((a = 1) OR ((b = 2) OR true))`, exprFacts{alwaysTrue: true}},
		{`((tenant_id = NULLIF(current_setting('racefree.tenant_id', true), '')) AND ((a = 1) OR true))`, exprFacts{settingRefs: 1}},
		{`(true AND true)`, exprFacts{alwaysTrue: true}},
	} {
		got, err := analyze(sql.NullString{String: c.expr, Valid: true}, s)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if *got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.expr, *got, c.want)
		}
	}
	if f, err := analyze(sql.NullString{}, s); f != nil || err != nil || !f.guards() {
		t.Errorf("no expression: %v, %v", f, err)
	}
	if _, err := analyze(sql.NullString{String: "tenant_id = (", Valid: true}, s); err == nil {
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

func TestFunctionReads(t *testing.T) {
	t.Parallel()
	orders := &table{schema: "app", name: "orders"}
	odd := &table{schema: "app", name: "Orders"}
	for _, c := range []struct {
		f    function
		t    *table
		want bool
	}{
		{function{schema: "app", body: "SELECT count(*) FROM orders"}, orders, true},
		{function{schema: "app", body: "select * from ORDERS o"}, orders, true},
		{function{schema: "app", body: `SELECT * FROM "orders"`}, orders, true},
		{function{schema: "app", body: "SELECT * FROM orders_archive"}, orders, false},
		{function{schema: "app", body: "SELECT * FROM old_orders"}, orders, false},
		{function{schema: "api", body: "SELECT * FROM app.orders"}, orders, true},
		{function{schema: "api", body: `SELECT * FROM "app" . "orders"`}, orders, true},
		{function{schema: "api", body: "SELECT * FROM orders"}, orders, false},
		{function{schema: "api", body: "SELECT * FROM orders", config: []string{"search_path=app, pg_temp"}}, orders, true},
		{function{schema: "app", body: "SELECT * FROM orders", config: []string{"search_path=api"}}, orders, false},
		{function{schema: "app", body: "SELECT * FROM other.orders"}, orders, false},
		{function{schema: "app", body: `SELECT * FROM "Orders"`}, odd, true},
		{function{schema: "app", body: `SELECT * FROM orders`}, odd, false},
		{function{schema: "api", body: `SELECT * FROM APP.Orders`}, orders, true},
	} {
		if got := c.f.reads(c.t); got != c.want {
			t.Errorf("%+v reads %s.%s: %v, want %v", c.f, c.t.schema, c.t.name, got, c.want)
		}
	}
}
