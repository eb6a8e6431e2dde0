package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// metricsOf scrapes h's /metrics.
func metricsOf(h http.Handler) string {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestJudgeRoleWarnsOnReadyzAndInMetrics: a server logged in as a role
// that can SET ROLE to a BYPASSRLS role, to the owner of racefree's
// tables (NOINHERIT), to a superuser role, or to a BYPASSRLS role through
// a chain, is still ready, and /readyz lists the warning's code and
// racefree_role_findings counts it; JudgeRole returns the path. A clean
// role gets no warning and zeros; SQLite, no judgement and no series.
func TestJudgeRoleWarnsOnReadyzAndInMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := testdb.NewDSN(t, racefree.Postgres)
	ownerDSN := testdb.OwnerDSN(t, base)
	owner := testdb.Open(t, ownerDSN, nil) // migrated: the owner owns racefree's tables
	ou, _ := url.Parse(ownerDSN)
	rs := testdb.MakeEscapeRoles(t, ou.User.Username())
	admin := testdb.Open(t, base, &racefree.Config{Schema: racefree.SchemaAllowOutdated})
	schema := ou.Query().Get("search_path")
	logins := []string{rs.Clean}
	for _, e := range rs.Escapes {
		logins = append(logins, e.Role)
	}
	// What serve needs to be ready: the schema and its version.
	testdb.ExecAll(t, admin, `GRANT USAGE ON SCHEMA `+schema+` TO `+strings.Join(logins, ", "))
	if _, err := owner.ExecContext(ctx, `GRANT SELECT ON racefree_schema_migrations TO `+strings.Join(logins, ", ")); err != nil {
		t.Fatal(err)
	}
	as := func(t *testing.T, role string) *racefree.DB {
		u, _ := url.Parse(ownerDSN)
		u.User = url.User(role)
		db, err := dsn.Open(ctx, u.String(), &racefree.Config{Schema: racefree.SchemaAllowOutdated})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	for _, e := range rs.Escapes {
		t.Run(e.Name, func(t *testing.T) {
			s := server.New(as(t, e.Role), server.Options{})
			found, err := s.JudgeRole(ctx)
			if err != nil || len(found) != 1 || found[0].Code != e.Kind.Code() || !strings.Contains(found[0].Path, `can SET ROLE to "`+e.Reached+`"`) {
				t.Fatalf("JudgeRole = %+v, %v; want %s reaching %s", found, err, e.Kind.Code(), e.Reached)
			}
			h := s.Handler()
			code, body, _ := do(t, h, "GET", "/readyz", "")
			ws, _ := body["warnings"].([]any)
			if code != 200 || body["status"] != "ready" || len(ws) != 1 || ws[0].(map[string]any)["code"] != e.Kind.Code() {
				t.Fatalf("readyz: %d %v; want ready with the warning %s", code, body, e.Kind.Code())
			}
			if d := ws[0].(map[string]any)["detail"].(string); strings.Contains(d, e.Role) || strings.Contains(d, e.Reached) {
				t.Errorf("readyz names roles to anyone: %q", d)
			}
			m := metricsOf(h)
			for _, k := range roles.Kinds {
				want := `racefree_role_findings{code="` + k.Code() + `"} 0`
				if k == e.Kind {
					want = `racefree_role_findings{code="` + k.Code() + `"} 1`
				}
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %q", want)
				}
			}
		})
	}
	t.Run("clean", func(t *testing.T) {
		s := server.New(as(t, rs.Clean), server.Options{})
		if found, err := s.JudgeRole(ctx); err != nil || len(found) != 0 {
			t.Fatalf("JudgeRole(clean) = %+v, %v", found, err)
		}
		h := s.Handler()
		if code, body, _ := do(t, h, "GET", "/readyz", ""); code != 200 || body["warnings"] != nil {
			t.Fatalf("readyz: %d %v", code, body)
		}
		if m := metricsOf(h); !strings.Contains(m, `racefree_role_findings{code="role-bypasses-rls"} 0`) || strings.Contains(m, `racefree_role_findings{code="role-bypasses-rls"} 1`) {
			t.Errorf("metrics of a clean role:\n%s", m)
		}
	})
	t.Run("sqlite", func(t *testing.T) {
		s := server.New(testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil), server.Options{})
		if found, err := s.JudgeRole(ctx); err != nil || found != nil {
			t.Fatalf("JudgeRole on SQLite = %+v, %v", found, err)
		}
		h := s.Handler()
		if code, body, _ := do(t, h, "GET", "/readyz", ""); code != 200 || body["warnings"] != nil {
			t.Fatalf("readyz: %d %v", code, body)
		}
		if m := metricsOf(h); strings.Contains(m, "racefree_role_findings{") {
			t.Errorf("SQLite has role findings:\n%s", m)
		}
	})
}
