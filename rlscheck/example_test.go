package rlscheck_test

import (
	"context"
	"fmt"
	"os"

	"github.com/racefree/racefree/rlscheck"
)

// Check the application's database before a deploy; the role is the one the
// application logs in as.
func Example() {
	c, err := rlscheck.Open(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	rep, err := c.Check(context.Background(), rlscheck.Options{Role: "app"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range rep.Findings {
		fmt.Printf("%s %s: %s\n  %s\n", f.Kind, f.Object, f.Problem, f.Fix)
	}
}

func ExampleWriteText() {
	rep := &rlscheck.Report{
		Schemas: []string{"public"}, TenantColumn: "tenant_id", Setting: "racefree.tenant_id", Role: "app",
		Tables: []string{`"public"."orders"`},
		Findings: []rlscheck.Finding{{
			Kind:    rlscheck.RLSNotForced,
			Object:  `"public"."orders"`,
			Problem: `row-level security is not forced: the owner "migrator" and roles with its privileges skip every policy`,
			Fix:     `ALTER TABLE "public"."orders" FORCE ROW LEVEL SECURITY;`,
		}},
	}
	_ = rlscheck.WriteText(os.Stdout, rep)
	// Output:
	// rls_not_forced "public"."orders"
	//   row-level security is not forced: the owner "migrator" and roles with its privileges skip every policy
	//   fix: ALTER TABLE "public"."orders" FORCE ROW LEVEL SECURITY;
	//
	// 1 findings: 1 tenant tables (column tenant_id) in public, setting racefree.tenant_id, role app
}
