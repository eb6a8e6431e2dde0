package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/testing/testdb"
	"github.com/racefree/racefree/onetime"
	"github.com/racefree/racefree/server"
	"github.com/racefree/racefree/tenant"
)

// badListen is an --addr that net.Listen refuses: serve checks every flag
// before it listens, so a flag it accepts ends in "listen:" (exit 1) and
// one it refuses in exit 2 naming the flag, without serve ever starting.
const badListen = "127.0.0.1:-1"

// TestOutside2ServeFlagsAtTheirBounds: serve refuses, exit 2 with one
// line naming the flag and before it listens or opens anything, each
// bound of its flags one step past it (a zero timeout of each kind, a
// zero --inbox-retention or --inbox-max-body, an --inbox-max-body one
// byte over server.MaxInboxBody, a --refresh-grace of 1ms without
// --refresh-secret), and takes each value at the bound itself (a
// zero --claim-grace, --dedup-retention, --token-retention and
// --wait-for-db, a --dashboard-secret and a --refresh-secret of exactly
// 32 bytes, --refresh-grace of exactly onetime.MaxGrace, 1ms of inbox
// retention, an --inbox-max-body of one byte and of exactly
// server.MaxInboxBody): those get as far as
// listening. No database file is created either way.
func TestOutside2ServeFlagsAtTheirBounds(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("s", onetime.MinSecretBytes)
	refused := []struct {
		flag string
		args []string
	}{
		{"inbox-retention", []string{"--inbox-retention", "0"}},
		{"inbox-retention", []string{"--inbox-retention", "999us"}},
		{"inbox-max-body", []string{"--inbox-max-body", "0"}},
		{"inbox-max-body", []string{"--inbox-max-body", strconv.Itoa(server.MaxInboxBody + 1)}},
		{"metrics-timeout", []string{"--metrics-timeout", "0"}},
		{"read-header-timeout", []string{"--read-header-timeout", "0"}},
		{"read-timeout", []string{"--read-timeout", "0"}},
		{"idle-timeout", []string{"--idle-timeout", "0"}},
		{"request-timeout", []string{"--request-timeout", "0"}},
		{"write-timeout", []string{"--write-timeout", "0"}},
		{"refresh-secret", []string{"--refresh-grace", "1ms"}},
		{"refresh-grace", []string{"--refresh-grace", (onetime.MaxGrace + 1e6).String(), "--refresh-secret", secret}},
		{"refresh-secret", []string{"--refresh-secret", secret[1:]}},
		{"dashboard-secret", []string{"--dashboard-secret", strings.Repeat("d", minDashboardSecret-1)}},
		{"wait-for-db", []string{"--wait-for-db", "-1ms"}},
	}
	accepted := [][]string{
		{"--claim-grace", "0"},
		{"--dedup-retention", "0"},
		{"--token-retention", "0"},
		{"--wait-for-db", "0"},
		{"--dashboard-secret", strings.Repeat("d", minDashboardSecret)},
		{"--refresh-secret", secret},
		{"--refresh-grace", onetime.MaxGrace.String(), "--refresh-secret", secret},
		{"--refresh-grace", "1ms", "--refresh-secret", secret},
		{"--inbox-retention", "1ms"},
		{"--inbox-max-body", "1"},
		{"--inbox-max-body", strconv.Itoa(server.MaxInboxBody)},
	}
	dir := t.TempDir()
	base := []string{"serve", "--db", "sqlite:" + filepath.Join(dir, "r.db"), "--addr", badListen}
	for _, c := range refused {
		args := append(append([]string{}, base...), c.args...)
		refusedAsUsage(t, runCLI(t, args...), c.flag, args)
	}
	for _, a := range accepted {
		args := append(append([]string{}, base...), a...)
		if r := runCLI(t, args...); r.code != 1 || !strings.HasPrefix(r.stderr, "racefree: listen: ") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: %+v; want the value taken: exit 1 at listen", a, r)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("serve refused before listening and wrote %d files", len(entries))
	}
}

// TestOutside2ServeLogFormatJSON: serve's logger with --log-format json
// writes each record as one JSON object on its own line, with the
// message and its attributes as fields; text writes key=value lines.
func TestOutside2ServeLogFormatJSON(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	log, err := newLogger(&b, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("racefree serving", "addr", "127.0.0.1:1")
	log.Debug("not at info")
	var got map[string]any
	if strings.Count(b.String(), "\n") != 1 || json.Unmarshal(b.Bytes(), &got) != nil || got["msg"] != "racefree serving" || got["addr"] != "127.0.0.1:1" {
		t.Fatalf("--log-format json wrote %q; want one JSON object with msg and addr", b.String())
	}
	b.Reset()
	if log, err = newLogger(&b, "text", "info"); err != nil {
		t.Fatal(err)
	}
	log.Info("racefree serving", "addr", "127.0.0.1:1")
	if !strings.Contains(b.String(), `msg="racefree serving" addr=127.0.0.1:1`) {
		t.Fatalf("--log-format text wrote %q", b.String())
	}
}

// TestOutside2EmptyEnvironmentIsUnset: an environment variable set to
// the empty string counts as unset, so the flag's default holds:
// RACEFREE_LOG_FORMAT= and RACEFREE_LOG_LEVEL= leave serve logging text at
// info (it gets as far as listening), and RACEFREE_DB= leaves migrate
// status at the default sqlite:racefree.db of the current directory.
func TestOutside2EmptyEnvironmentIsUnset(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runIn(t, dir, []string{"RACEFREE_LOG_FORMAT=", "RACEFREE_LOG_LEVEL=", "RACEFREE_DB="}, "serve", "--addr", badListen)
	if r.code != 1 || !strings.HasPrefix(r.stderr, "racefree: listen: ") {
		t.Errorf("serve with empty RACEFREE_LOG_FORMAT and RACEFREE_LOG_LEVEL: %+v; want the defaults, exit 1 at listen", r)
	}
	r = runIn(t, dir, []string{"RACEFREE_DB="}, "migrate", "status")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "racefree: no database at racefree.db ") {
		t.Errorf("migrate status with RACEFREE_DB=: %+v; want the default racefree.db", r)
	}
}

// TestOutside2MigrateStatusAfterAStagedRollout: after migrate up --to 11,
// migrate status lists migrations 1 to 11 with the time each was applied
// and every later one as pending, in text; in JSON the later ones are
// applied false without an applied_at, the earlier ones applied with one.
func TestOutside2MigrateStatusAfterAStagedRollout(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		if r := runCLI(t, "migrate", "up", "--db", d, "--to", "11"); r.code != 0 {
			t.Fatalf("migrate up --to 11: %+v", r)
		}
		r := runCLI(t, "migrate", "status", "--db", d)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) < 13 {
			t.Fatalf("migrate status: %+v", r)
		}
		for _, l := range lines[1:] {
			pending := strings.HasSuffix(l, " pending")
			if want := l[:3] > "011"; pending != want {
				t.Errorf("migrate status line %q: pending %v, want %v", l, pending, want)
			}
		}
		r = runCLI(t, "migrate", "status", "--db", d, "--format", "json")
		var got struct {
			Migrations []map[string]any `json:"migrations"`
		}
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil || len(got.Migrations) != len(lines)-1 {
			t.Fatalf("migrate status --format json: %+v", r)
		}
		for _, m := range got.Migrations {
			applied := m["version"].(float64) <= 11
			_, dated := m["applied_at"]
			if m["applied"] != applied || dated != applied {
				t.Errorf("migration %v: %v; want applied and applied_at only up to 11", m["version"], m)
			}
		}
	})
}

// TestOutside2MigrateUpAppRoleNameAndJSON: on PostgreSQL, migrate up
// --app-role with a name that is no identifier is bad input, exit 2, one
// line, and nothing migrated; with the application role and --format
// json it prints {version, granted} naming the role.
func TestOutside2MigrateUpAppRoleNameAndJSON(t *testing.T) {
	t.Parallel()
	d := testdb.NewDSN(t, racefree.Postgres)
	r := runCLI(t, "migrate", "up", "--db", d, "--app-role", "bad\x01role")
	refusedAsUsage(t, r, "app-role", []string{"--app-role", "bad\\x01role"})
	if st := runCLI(t, "migrate", "status", "--db", d, "--format", "json"); strings.Contains(st.stdout, `"applied":true`) {
		t.Errorf("a refused --app-role migrated: %s", st.stdout)
	}

	ownerDSN := testdb.OwnerDSN(t, testdb.NewDSN(t, racefree.Postgres))
	ownSchema(t, ownerDSN)
	role := userOf(t, newAppRole(t, ownerDSN))
	r = runCLI(t, "migrate", "up", "--db", ownerDSN, "--app-role", role, "--format", "json")
	var got map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil || got["granted"] != role || got["version"] == nil {
		t.Fatalf("migrate up --app-role --format json: %+v; want {version, granted: %s}", r, role)
	}
}

// TestOutside2DoctorOnASchemaAhead: doctor on a database whose schema is
// newer than the binary reports schema-ahead as an error and exits 1
// (findings), not 0.
func TestOutside2DoctorOnASchemaAhead(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		db := testdb.Open(t, d, nil)
		if _, err := db.ExecContext(context.Background(), `INSERT INTO racefree_schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)`); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, "doctor", "--db", d, "--format", "json")
		var got []map[string]any
		if r.code != exitFindings || json.Unmarshal([]byte(r.stdout), &got) != nil || len(got) != 1 || got[0]["code"] != "schema-ahead" || got[0]["severity"] != "error" {
			t.Fatalf("doctor on a schema ahead: %+v; want one schema-ahead error, exit 1", r)
		}
	})
}

// TestOutside2VersionOfACleanTree: a binary built from a clean tree
// (vcs.modified=false) is not reported modified, and version --format
// json names the revision "revision".
func TestOutside2VersionOfACleanTree(t *testing.T) {
	t.Parallel()
	v := buildVersion(&debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Path: "github.com/racefree/racefree", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}})
	if v.Modified || v.String() != "racefree v1.2.3 (revision abc123; go1.26)" {
		t.Errorf("clean tree: %+v %q; want not modified", v, v.String())
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if json.Unmarshal(b, &got) != nil || got["revision"] != "abc123" || got["modified"] != false {
		t.Errorf("version --format json: %s; want revision abc123, modified false", b)
	}
}

// TestOutside2KeysListOneTenant: keys list --tenant T lists T's keys and
// no other tenant's (not the default tenant's), and a tenant without keys
// lists none; a revoked key shows revoked_at in keys revoke and keys list
// --format json.
func TestOutside2KeysListOneTenant(t *testing.T) {
	t.Parallel()
	testdb.EachDSN(t, func(t *testing.T, d string) {
		testdb.Open(t, d, nil)
		ids := map[string]string{}
		for _, tn := range []string{tenant.Default, "acme"} {
			var c map[string]any
			if r := runCLI(t, "keys", "create", "--db", d, "--tenant", tn, "--format", "json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &c) != nil {
				t.Fatalf("create %s: %+v", tn, r)
			}
			ids[tn] = c["id"].(string)
		}
		for tn, id := range ids {
			r := runCLI(t, "keys", "list", "--db", d, "--tenant", tn, "--format", "json")
			var k map[string]any
			if r.code != 0 || strings.Count(r.stdout, "\n") != 1 || json.Unmarshal([]byte(r.stdout), &k) != nil || k["id"] != id || k["tenant"] != tn {
				t.Errorf("keys list --tenant %s: %+v; want its one key %s", tn, r, id)
			}
		}
		if r := runCLI(t, "keys", "list", "--db", d, "--tenant", "globex", "--format", "json"); r.code != 0 || r.stdout != "" {
			t.Errorf("keys list --tenant globex (no keys): %+v; want none", r)
		}
		var rv map[string]any
		if r := runCLI(t, "keys", "revoke", "--db", d, "--tenant", "acme", ids["acme"], "--format", "json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &rv) != nil || rv["revoked_at"] == nil {
			t.Fatalf("keys revoke --format json: %+v; want revoked_at", r)
		}
		var k map[string]any
		if r := runCLI(t, "keys", "list", "--db", d, "--tenant", "acme", "--format", "json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &k) != nil || k["revoked_at"] != rv["revoked_at"] {
			t.Errorf("keys list after revoke: %+v; want revoked_at %v", r, rv["revoked_at"])
		}
	})
}
