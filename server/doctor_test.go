package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/server"
)

// readyDoctor returns /readyz's status and its "doctor" findings as
// code -> severity (nil when absent).
func readyDoctor(t *testing.T, s *server.Server) (int, map[string]string) {
	t.Helper()
	code, body, _ := do(t, s.Handler(), "GET", "/readyz", "")
	raw, ok := body["doctor"].([]any)
	if !ok {
		return code, nil
	}
	got := map[string]string{}
	for _, f := range raw {
		m := f.(map[string]any)
		got[m["code"].(string)] = m["severity"].(string)
		if len(m) != 2 {
			t.Errorf("readyz doctor finding %v has more than code and severity", m)
		}
	}
	return code, got
}

// TestDoctorOnReadyzAndInMetrics: before Doctor runs /readyz has no
// "doctor"; after, it lists each finding's code and severity and stays
// 200, and racefree_doctor_findings counts each code (0 for those not
// found). A finding cleared in the database is gone at the next Doctor.
func TestDoctorOnReadyzAndInMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		s := server.New(testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil), server.Options{})
		if code, got := readyDoctor(t, s); code != 200 || got != nil {
			t.Fatalf("before Doctor: %d %v", code, got)
		}
		rep, err := s.Doctor(ctx)
		if err != nil || len(rep.Findings) != 1 {
			t.Fatalf("Doctor = %v, %v", rep, err)
		}
		if code, got := readyDoctor(t, s); code != 200 || len(got) != 1 || got["sqlite-wal-normal"] != "info" {
			t.Fatalf("readyz: %d %v", code, got)
		}
		m := metricsOf(s.Handler())
		for _, want := range []string{`racefree_doctor_findings{code="sqlite-wal-normal"} 1`, `racefree_doctor_findings{code="sqlite-synchronous-off"} 0`, `racefree_doctor_findings{code="doctor-not-run"} 0`} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %q", want)
			}
		}
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		db := testdb.Open(t, testdb.NewDSN(t, racefree.Postgres), nil)
		if _, err := db.SQL().Exec(`ALTER TABLE racefree_quotas NO FORCE ROW LEVEL SECURITY`); err != nil {
			t.Fatal(err)
		}
		s := server.New(db, server.Options{})
		rep, err := s.Doctor(ctx)
		if err != nil {
			t.Fatal(err)
		}
		code, got := readyDoctor(t, s)
		if code != 200 || got["rls-not-forced"] != "error" || got["role-is-superuser"] != "error" {
			t.Fatalf("readyz: %d %v (report %v)", code, got, rep.Findings)
		}
		if m := metricsOf(s.Handler()); !strings.Contains(m, `racefree_doctor_findings{code="rls-not-forced"} 1`) || !strings.Contains(m, `racefree_doctor_findings{code="fsync-off"} 0`) {
			t.Errorf("metrics:\n%s", m)
		}
		if _, err := db.SQL().Exec(`ALTER TABLE racefree_quotas FORCE ROW LEVEL SECURITY`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Doctor(ctx); err != nil {
			t.Fatal(err)
		}
		if code, got := readyDoctor(t, s); code != 200 || got["rls-not-forced"] != "" {
			t.Fatalf("readyz after the fix: %d %v", code, got)
		}
		if m := metricsOf(s.Handler()); !strings.Contains(m, `racefree_doctor_findings{code="rls-not-forced"} 0`) {
			t.Errorf("metrics after the fix lack rls-not-forced 0")
		}
	})
	t.Run("not run", func(t *testing.T) {
		t.Parallel()
		db := testdb.Open(t, testdb.NewDSN(t, racefree.SQLite), nil)
		s := server.New(db, server.Options{})
		_ = db.Close()
		if _, err := s.Doctor(ctx); err == nil {
			t.Fatal("Doctor on a closed database: no error")
		}
		if m := metricsOf(s.Handler()); !strings.Contains(m, `racefree_doctor_findings{code="doctor-not-run"} 1`) {
			t.Errorf("metrics lack doctor-not-run 1")
		}
	})
}
