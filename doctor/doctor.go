package doctor

import (
	"context"
	"database/sql"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/racefree/racefree"
	"github.com/racefree/racefree/internal/query"
	"github.com/racefree/racefree/internal/roles"
	"github.com/racefree/racefree/internal/statement"
	"github.com/racefree/racefree/rlscheck"
	"github.com/racefree/racefree/tenant"
)

//go:embed sql/postgres/definers.sql
var definersSQL string

//go:embed sql/postgres/settings.sql
var settingsSQL string

//go:embed sql/postgres/role_settings.sql
var roleSettingsSQL string

//go:embed sql/postgres/replication.sql
var replicationSQL string

//go:embed sql/postgres/rls.sql
var rlsSQL string

//go:embed sql/postgres/grants.sql
var grantsSQL string

//go:embed sql/postgres/views.sql
var viewsSQL string

//go:embed sql/postgres/analyze.sql
var analyzeSQL string

//go:embed sql/postgres/counts.sql
var countsSQL string

//go:embed sql/postgres/statistics.sql
var statisticsSQL string

//go:embed sql/postgres/backend.sql
var backendSQL string

//go:embed sql/sqlite/durability.sql
var sqliteDurabilitySQL string

func init() {
	for _, q := range []*string{&settingsSQL, &roleSettingsSQL, &replicationSQL, &rlsSQL, &grantsSQL, &analyzeSQL, &countsSQL, &statisticsSQL, &backendSQL, &sqliteDurabilitySQL} {
		*q = query.Embedded(*q)
	}
}

// Severity says how much a finding matters: Error, a guarantee is broken
// or data may be corrupted; Warn, a guarantee is weaker than racefree
// says, or could not be judged; Info, something to know that breaks no
// guarantee. The strings are stable.
type Severity string

// The severities, from the least.
const (
	Info  Severity = "info"
	Warn  Severity = "warn"
	Error Severity = "error"
)

// The finding codes. They are stable: scripts, alerts and the gauge
// racefree_doctor_findings{code} key on them.
const (
	FsyncOff                 = "fsync-off"
	FullPageWritesOff        = "full-page-writes-off"
	SynchronousCommitOff     = "synchronous-commit-off"
	NoStandbyWaits           = "no-standby-waits"
	SyncStandbyNotStreaming  = "sync-standby-not-streaming"
	ReplicationNotJudged     = "replication-not-judged"
	StrictRefusesWrites      = "strict-refuses-writes"
	SettingsNotJudged        = "settings-not-judged"
	RoleNotJudged            = "role-not-judged"
	RLSNotForced             = "rls-not-forced"
	RLSNotJudged             = "rls-not-judged"
	PrivilegeEscapesRLS      = "privilege-escapes-rls"
	ViewEscapesRLS           = "view-escapes-rls"
	DefinerEscapesRLS        = "definer-escapes-rls"
	SchemaBehind             = "schema-behind"
	SchemaAhead              = "schema-ahead"
	SchemaNotJudged          = "schema-not-judged"
	NeverAnalyzed            = "never-analyzed"
	StaleStatistics          = "stale-statistics"
	AutovacuumOff            = "autovacuum-off"
	AnalyzeNotJudged         = "analyze-not-judged"
	PoolerPreparedStatements = "pooler-prepared-statements"
	PoolerNotJudged          = "pooler-not-judged"
	SQLiteSynchronousOff     = "sqlite-synchronous-off"
	SQLiteJournalUnsafe      = "sqlite-journal-unsafe"
	SQLiteRollbackNormal     = "sqlite-rollback-normal"
	SQLiteWALNormal          = "sqlite-wal-normal"
	SQLiteNotJudged          = "sqlite-not-judged"
)

// The role findings' codes are internal/roles' Kind.Code():
// role-is-superuser, role-bypasses-rls, role-owns-tables,
// role-creates-roles and role-reaches-server-files.

// Codes returns every code Check can report on engine ([racefree.Postgres]
// or [racefree.SQLite]), in the order of the checks.
func Codes(engine string) []string {
	schema := []string{SchemaBehind, SchemaAhead, SchemaNotJudged}
	if engine != racefree.Postgres {
		return append([]string{SQLiteJournalUnsafe, SQLiteSynchronousOff, SQLiteRollbackNormal, SQLiteWALNormal, SQLiteNotJudged}, schema...)
	}
	out := []string{FsyncOff, FullPageWritesOff, SynchronousCommitOff, SettingsNotJudged, NoStandbyWaits, SyncStandbyNotStreaming, ReplicationNotJudged, StrictRefusesWrites}
	for _, k := range roles.Kinds {
		out = append(out, k.Code())
	}
	out = append(out, RoleNotJudged)
	out = append(out, schema...)
	return append(out, RLSNotForced, PrivilegeEscapesRLS, ViewEscapesRLS, DefinerEscapesRLS, RLSNotJudged, NeverAnalyzed, StaleStatistics, AutovacuumOff, AnalyzeNotJudged, PoolerPreparedStatements, PoolerNotJudged)
}

// Finding is one thing Check found. Detail says what and what it means,
// naming the tables or the role path; Fix is what to do (SQL where there is
// one), or empty.
type Finding struct {
	Code     string   `json:"code"`
	Severity Severity `json:"severity"`
	Detail   string   `json:"detail"`
	Fix      string   `json:"fix"`
}

// String is the finding in one line: "severity code: detail (fix: …)".
func (f Finding) String() string {
	s := fmt.Sprintf("%s %s: %s", f.Severity, f.Code, f.Detail)
	if f.Fix != "" {
		s += " (fix: " + f.Fix + ")"
	}
	return s
}

// Report is the outcome of Check: its findings, worst first in the order
// of the checks.
type Report struct {
	Engine   string    `json:"engine"`
	Findings []Finding `json:"findings"`
}

// Failed reports whether a finding has severity Warn or Error: what
// `racefree doctor` exits 1 for. Info findings alone exit 0.
func (r Report) Failed() bool {
	for _, f := range r.Findings {
		if f.Severity != Info {
			return true
		}
	}
	return false
}

// Options configures Check. The zero value checks the connecting role.
type Options struct {
	// Role is the PostgreSQL role to judge. Defaults to current_user, the
	// role Check connects as.
	Role string
	// Timeout bounds the whole check. Defaults to DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 30 * time.Second

// ErrNotAnswering is returned when the database does not answer at all:
// nothing could be checked.
var ErrNotAnswering = errors.New("doctor: the database does not answer")

// Check runs every check of db's engine (the package doc lists them) and
// returns what it found. A check that fails on its own leaves its
// <check>-not-judged finding and Check goes on; Check returns an error
// only when the database does not answer (ErrNotAnswering, wrapping the
// cause) or Options.Role names no role (a *racefree.InputError). It
// changes nothing.
func Check(ctx context.Context, db *racefree.DB, opts Options) (Report, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	rep := Report{Engine: db.Engine(), Findings: []Finding{}}
	if err := db.SQL().PingContext(ctx); err != nil {
		return rep, fmt.Errorf("%w: %w", ErrNotAnswering, err)
	}
	c := &checker{db: db, q: db.SQL()}
	var err error
	if db.Engine() == racefree.Postgres {
		c.settings(ctx, opts.Role)
		c.replication(ctx)
		c.strict(ctx)
		err = c.role(ctx, opts.Role)
		c.schema(ctx)
		c.rls(ctx)
		c.grants(ctx)
		c.views(ctx)
		c.definers(ctx)
		if c.counted(ctx) {
			c.analyze(ctx)
			c.statistics(ctx)
		}
		c.pooler(ctx)
	} else {
		c.sqlite(ctx)
		c.schema(ctx)
	}
	rep.Findings = append(rep.Findings, c.found...)
	return rep, err
}

type checker struct {
	db      *racefree.DB
	q       *sql.DB
	found   []Finding
	version int64  // the schema version, -1 unknown
	judged  string // the role judged, "" when it could not be
	// set by settings
	syncCommit, standbyNames string
	settingsRead             bool
	whose                    string // whose synchronous_commit syncCommit is: "this session" or a role's
}

func (c *checker) add(code string, sev Severity, fix, format string, args ...any) {
	c.found = append(c.found, Finding{Code: code, Severity: sev, Detail: fmt.Sprintf(format, args...), Fix: fix})
}

func (c *checker) notJudged(code, what string, err error) {
	c.add(code, Warn, "", "could not judge %s, so it is not known to be safe: %v", what, oneLine(err))
}

// each runs query with args and calls scan on each row it returns. A
// query, a scan or the rows' end that fails leaves code's not-judged
// finding about what, and each reports false: the check then judges
// nothing.
func (c *checker) each(ctx context.Context, query, code, what string, scan func(*sql.Rows) error, args ...any) bool {
	rows, err := c.q.QueryContext(ctx, query, args...)
	if err == nil {
		for err == nil && rows.Next() {
			err = scan(rows)
		}
		if err != nil {
			rows.Close()
		} else {
			err = statement.CloseRows(rows)
		}
	}
	if err != nil {
		c.notJudged(code, what, err)
		return false
	}
	return true
}

// settings reads the server's durability settings and the
// synchronous_commit of the judged role's sessions: the checking
// session's own, unless role names another role, whose sessions start
// with what ALTER ROLE or ALTER DATABASE set for them (roleSyncCommit).
func (c *checker) settings(ctx context.Context, role string) {
	var fsync, fpw string
	var recovery bool
	err := c.q.QueryRowContext(ctx, settingsSQL).Scan(&fsync, &fpw, &c.syncCommit, &c.standbyNames, &recovery)
	if err != nil {
		c.notJudged(SettingsNotJudged, "fsync, full_page_writes and synchronous_commit", err)
		return
	}
	c.settingsRead = true
	c.whose = "this session"
	if role != "" {
		c.roleSyncCommit(ctx, role)
	}
	if fsync != "on" {
		c.add(FsyncOff, Error, "ALTER SYSTEM SET fsync = on; SELECT pg_reload_conf();",
			"fsync is %s: PostgreSQL does not wait for the disk, so a crash of the operating system or a power loss may lose commits it acknowledged and corrupt the cluster", fsync)
	}
	if fpw != "on" {
		c.add(FullPageWritesOff, Error, "ALTER SYSTEM SET full_page_writes = on; SELECT pg_reload_conf();",
			"full_page_writes is %s: a power loss in the middle of a page write may leave a torn page that recovery cannot repair", fpw)
	}
	if c.settingsRead && c.syncCommit == "off" {
		c.add(SynchronousCommitOff, Warn, "ALTER SYSTEM SET synchronous_commit = on; SELECT pg_reload_conf(); (and drop any ALTER ROLE or ALTER DATABASE … SET synchronous_commit = off)",
			"synchronous_commit is off for %s: a crash of the server loses the last commits it acknowledged (up to three times wal_writer_delay), though the cluster stays consistent", c.whose)
	}
}

// roleSyncCommit makes c.syncCommit that of role's sessions when role is
// not the checking role: the value ALTER ROLE … IN DATABASE, ALTER ROLE,
// ALTER DATABASE or ALTER ROLE ALL … SET gives them, most specific first,
// or else the server's, which the checking session shows only when it
// has no value of its own (from its role, its DSN or a SET); when it has
// one, synchronous_commit, and what the replication check reads from it,
// is settings-not-judged, never the checking session's value taken for
// the role's.
func (c *checker) roleSyncCommit(ctx context.Context, role string) {
	var set sql.NullString
	var source, current string
	if err := c.q.QueryRowContext(ctx, roleSettingsSQL, role).Scan(&set, &source, &current); err != nil {
		c.notJudged(SettingsNotJudged, fmt.Sprintf("the synchronous_commit of role %q's sessions", role), err)
		c.settingsRead = false
		return
	}
	if role == current {
		return
	}
	c.whose = fmt.Sprintf("role %q's sessions", role)
	switch {
	case set.Valid:
		c.syncCommit = syncCommitName(set.String)
	case source == "user" || source == "database user" || source == "client" || source == "session":
		c.add(SettingsNotJudged, Warn, "run the check as role "+role+", with the application's DSN",
			"could not judge the synchronous_commit of role %q's sessions, so it is not known to be safe: no ALTER ROLE or ALTER DATABASE sets it, and the server's value is hidden by this session's own (its source: %s)", role, source)
		c.settingsRead = false
	}
}

// syncCommitName returns a synchronous_commit value as written (any case,
// or a boolean's other spellings) by the name PostgreSQL shows for it.
func syncCommitName(v string) string {
	switch v = strings.ToLower(strings.TrimSpace(v)); v {
	case "false", "no", "0":
		return "off"
	case "true", "yes", "1":
		return "on"
	}
	return v
}

func (c *checker) replication(ctx context.Context) {
	var streaming, visible, synchronous, wanted int
	if err := c.q.QueryRowContext(ctx, replicationSQL).Scan(&streaming, &visible, &synchronous, &wanted); err != nil {
		c.notJudged(ReplicationNotJudged, "whether a standby waits for each commit", err)
		return
	}
	if !c.settingsRead {
		if streaming > 0 || visible > 0 {
			c.add(ReplicationNotJudged, Warn, "", "%d standbys stream from this server, and synchronous_commit and synchronous_standby_names could not be read: whether a standby waits for each commit is not known", streaming)
		}
		return
	}
	names := strings.TrimSpace(c.standbyNames)
	if names == "" {
		if streaming > 0 {
			c.add(NoStandbyWaits, Warn, "ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (*)'; SELECT pg_reload_conf();",
				"%d standbys stream from this server but synchronous_standby_names is empty: no standby waits for a commit, so a failover may lose commits the primary acknowledged", streaming)
		}
		return
	}
	if streaming > 0 && (c.syncCommit == "off" || c.syncCommit == "local") {
		c.add(NoStandbyWaits, Warn, "ALTER SYSTEM SET synchronous_commit = on; SELECT pg_reload_conf();",
			"%d standbys stream from this server and synchronous_standby_names is %q, but synchronous_commit is %s for %s: its commits wait for no standby, so a failover may lose commits the primary acknowledged", streaming, names, c.syncCommit, c.whose)
	}
	switch {
	case streaming == 0:
		c.add(SyncStandbyNotStreaming, Error, "start the standby, or empty synchronous_standby_names",
			"synchronous_standby_names is %q but no standby streams from this server: every commit waits for a standby that is not there", names)
	case visible < streaming:
		c.add(ReplicationNotJudged, Warn, "GRANT pg_read_all_stats TO the checking role, or run the check as a superuser",
			"%d standbys stream from this server and synchronous_standby_names is %q, but this role may not see their sync_state: whether one of them is synchronous is not known", streaming, names)
	case synchronous == 0:
		c.add(SyncStandbyNotStreaming, Error, "point synchronous_standby_names at the standbys' application_name",
			"synchronous_standby_names is %q but none of the %d streaming standbys is synchronous: every commit waits for a standby that is not there", names, streaming)
	case synchronous < wanted:
		c.add(SyncStandbyNotStreaming, Error, "start the missing standbys, or lower the number synchronous_standby_names waits for",
			"synchronous_standby_names is %q, which waits for %d synchronous standbys, but %d of the %d streaming standbys are synchronous: every commit waits for a standby that is not there", names, wanted, synchronous, streaming)
	}
}

// strict reports, for a DB that requires synchronous replication
// ([racefree.Config.RequireSynchronousReplication]), whether a write would
// be refused now, by running the very check that begins every write
// ([tenant.CheckDurable]): its reason when it would, as an error.
func (c *checker) strict(ctx context.Context) {
	if !c.db.RequiresSynchronousReplication() {
		return
	}
	err := tenant.CheckDurable(ctx, c.db)
	var nd *racefree.NotDurableError
	switch {
	case errors.As(err, &nd):
		c.add(StrictRefusesWrites, Error, "make a standby synchronous (synchronous_standby_names, synchronous_commit on), and GRANT pg_read_all_stats to the role",
			"racefree requires synchronous replication (--require-synchronous-replication) and refuses every write now, 503 not-durable: %s", nd.Reason)
	case err != nil:
		c.notJudged(StrictRefusesWrites, "whether the strict mode (--require-synchronous-replication) accepts writes", err)
	}
}

func (c *checker) role(ctx context.Context, role string) error {
	if role == "" {
		if err := c.q.QueryRowContext(ctx, `SELECT current_user`).Scan(&role); err != nil {
			c.notJudged(RoleNotJudged, "the connecting role", err)
			return nil
		}
	}
	found, err := roles.JudgeRacefree(ctx, c.q, role)
	if errors.Is(err, roles.ErrNoRole) {
		return racefree.Invalid("role", "%q does not exist", role)
	}
	if err != nil {
		c.notJudged(RoleNotJudged, fmt.Sprintf("whether role %q escapes row-level security", role), err)
		return nil
	}
	c.judged = role
	for _, f := range found {
		fix := f.Revoke()
		if fix == "" {
			fix = "serve as a role that `racefree migrate up --app-role` accepts"
		}
		c.add(f.Kind.Code(), Error, fix, "%s: row-level security does not bind it", f.String())
	}
	return nil
}

// tenantsVersion is the migration that enables and forces row-level
// security on racefree's tables (012_tenant_keys).
const tenantsVersion = 12

func (c *checker) schema(ctx context.Context) {
	c.version = -1
	have, err := c.db.SchemaVersion(ctx)
	if err != nil {
		c.notJudged(SchemaNotJudged, "the schema version", err)
		return
	}
	want, err := c.db.CodeVersion()
	if err != nil {
		c.notJudged(SchemaNotJudged, "the schema version", err)
		return
	}
	c.version = have
	switch {
	case have < want:
		c.add(SchemaBehind, Warn, "racefree migrate up",
			"the schema is at version %d and this racefree's is %d: serve migrates it when it starts, unless --migrate=false, with which it serves the default tenant only from version 11 and refuses to start below it; the primitives whose migrations are missing run in their compatible mode", have, want)
	case have > want:
		c.add(SchemaAhead, Error, "run the racefree release that migrated the schema",
			"the schema is at version %d, newer than this racefree's %d: this binary refuses to serve it", have, want)
	}
}

func (c *checker) rls(ctx context.Context) {
	if c.version < 0 {
		c.add(RLSNotJudged, Warn, "", "could not judge racefree's tables' row-level security: the schema version is not known")
		return
	}
	if c.version < tenantsVersion {
		return // tables not yet bound by row-level security: schema-behind says so
	}
	var names, fixes []string
	if !c.each(ctx, rlsSQL, RLSNotJudged, "racefree's tables' row-level security", func(rows *sql.Rows) error {
		var name string
		var enabled, forced bool
		if err := rows.Scan(&name, &enabled, &forced); err != nil {
			return err
		}
		names = append(names, name)
		if !enabled {
			fixes = append(fixes, "ALTER TABLE "+name+" ENABLE ROW LEVEL SECURITY;")
		}
		if !forced {
			fixes = append(fixes, "ALTER TABLE "+name+" FORCE ROW LEVEL SECURITY;")
		}
		return nil
	}) {
		return
	}
	if len(names) > 0 {
		c.add(RLSNotForced, Error, strings.Join(fixes, " "),
			"row-level security is not both enabled and forced on %s: a role that owns the table, or any role when it is not enabled, reads and writes every tenant's rows", strings.Join(names, ", "))
	}
}

// grants reports the privileges row-level security does not bind
// (grants.sql) that the judged role holds on racefree's tables, directly,
// through a role it is a member of, or as PUBLIC: one finding, each table
// and grantee named once with its privileges and its REVOKE, the owner's
// (a grant another role made outlives it, and so does the finding, until
// that role's grant option is revoked CASCADE). It judges nothing when
// the role or the schema version is unknown (their findings say so) or
// the schema is older than the tables' row-level security.
func (c *checker) grants(ctx context.Context) {
	if c.judged == "" || c.version < tenantsVersion {
		return
	}
	// grants.sql returns the rows ordered by table and grantee: each pair's
	// privileges follow one another, a privilege that two grantors granted
	// once for each.
	type grant struct{ table, grantee, privileges string }
	var found []grant
	if !c.each(ctx, grantsSQL, RLSNotJudged, fmt.Sprintf("the privileges of role %q on racefree's tables", c.judged), func(rows *sql.Rows) error {
		var g grant
		if err := rows.Scan(&g.table, &g.grantee, &g.privileges); err != nil {
			return err
		}
		switch last := len(found) - 1; {
		case last < 0 || found[last].table != g.table || found[last].grantee != g.grantee:
			found = append(found, g)
		case !strings.HasSuffix(found[last].privileges, g.privileges):
			found[last].privileges += ", " + g.privileges
		}
		return nil
	}, c.judged) || len(found) == 0 {
		return
	}
	var names, fixes []string
	for _, g := range found {
		names = append(names, fmt.Sprintf("%s on %s to %s", g.privileges, g.table, g.grantee))
		fixes = append(fixes, fmt.Sprintf("REVOKE %s ON %s FROM %s;", g.privileges, g.table, g.grantee))
	}
	c.add(PrivilegeEscapesRLS, Error, strings.Join(fixes, " "),
		"role %q holds privileges row-level security does not bind (%s): TRUNCATE empties every tenant's rows, TRIGGER runs its trigger on every tenant's rows as they are written, REFERENCES tells which keys exist", c.judged, strings.Join(names, "; "))
}

// views reports the views and materialized views through which the
// judged role reads racefree's tables as a role row-level security does
// not bind (views.sql): a view reads with its owner's privileges, so one
// a superuser made and granted to the application role hands it every
// tenant's rows. One finding, each view named with the tables it reads
// and its owner; the fix makes each plain view read as its caller
// (security_invoker, PostgreSQL 15 on), and leaves the others to the
// operator. It judges nothing when grants does not.
func (c *checker) views(ctx context.Context) {
	if c.judged == "" || c.version < tenantsVersion {
		return
	}
	var names, fixes []string
	if !c.each(ctx, viewsSQL, RLSNotJudged, fmt.Sprintf("the views through which role %q reads racefree's tables", c.judged), func(rows *sql.Rows) error {
		var view, tables, kind, owner, fix string
		if err := rows.Scan(&view, &tables, &kind, &owner, &fix); err != nil {
			return err
		}
		names = append(names, fmt.Sprintf("%s %s, owned by %s, over %s", kind, view, owner, tables))
		if fix != "" {
			fixes = append(fixes, fix)
		}
		return nil
	}, c.judged) || len(names) == 0 {
		return
	}
	c.add(ViewEscapesRLS, Error, strings.Join(fixes, " "),
		"role %q reads racefree's tables through views whose owners row-level security does not bind (%s): each hands it every tenant's rows; make each read as its caller, revoke the role's SELECT on it, or give it an owner row-level security binds", c.judged, strings.Join(names, "; "))
}

// definers reports the SECURITY DEFINER functions and procedures through
// which the judged role may read racefree's tables as a role row-level
// security does not bind: those it can run whose bodies may run as such a
// role, their owner or, through the definers that owner can run, at any
// depth, another (definers.sql), and that reach racefree's tables, at any
// depth through the functions they call and the views they read, or
// whose bodies cannot be followed (SQL built at run time, a language that
// cannot be read): rls-check's follower, on racefree's schema, says
// which. One finding, each function named once with its owner and its
// paths; the fix makes each run as its caller (SECURITY INVOKER), or
// revoke the role's EXECUTE. It judges nothing when grants does not; when
// the follower fails, the functions it could not clear are rls-not-judged,
// never clean. A database without such definers costs one query.
func (c *checker) definers(ctx context.Context) {
	if c.judged == "" || c.version < tenantsVersion {
		return
	}
	what := fmt.Sprintf("the SECURITY DEFINER functions role %q can run on racefree's tables", c.judged)
	type definer struct {
		owner   string
		unbound bool     // row-level security does not bind its owner
		via     []string // the definers of unbound owners its owner can run
	}
	found := map[string]definer{} // by the function, quoted as rls-check names it
	var order []string
	var schema string
	if !c.each(ctx, definersSQL, RLSNotJudged, what, func(rows *sql.Rows) error {
		var name, via string
		var d definer
		if err := rows.Scan(&schema, &name, &d.owner, &d.unbound, &via); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(via), &d.via); err != nil {
			return err
		}
		found[name] = d
		order = append(order, name)
		return nil
	}, c.judged) || len(order) == 0 {
		return
	}
	rep, err := rlscheck.New(c.q).Check(ctx, rlscheck.Options{Schemas: []string{schema}, TenantColumn: "tenant", Setting: tenant.Setting})
	if err != nil {
		c.notJudged(RLSNotJudged, what+" ("+strings.Join(order, ", ")+")", err)
		return
	}
	// What the follower found of each definer: paths to racefree's
	// tables, and bodies it could not follow (a function with both is
	// reported once for each).
	problems := map[string][]rlscheck.Finding{}
	for _, f := range rep.Findings {
		if f.Kind == rlscheck.DefinerReadsTenantTable || f.Kind == rlscheck.DefinerNotFollowed {
			problems[f.Object] = append(problems[f.Object], f)
		}
	}
	var names, fixes []string
	for _, name := range order {
		d, fs := found[name], problems[name]
		if len(fs) == 0 || !d.unbound && !through(d.via, problems) {
			continue
		}
		var ps []string
		for _, f := range fs {
			ps = append(ps, f.Problem)
		}
		names = append(names, fmt.Sprintf("%s, owned by %s: %s", name, d.owner, strings.Join(ps, "; ")))
		fixes = append(fixes, fs[0].Fix)
	}
	if len(names) == 0 {
		return
	}
	c.add(DefinerEscapesRLS, Error, strings.Join(fixes, " "),
		"role %q can run SECURITY DEFINER functions whose bodies may run as a role row-level security does not bind (%s): each may hand it every tenant's rows; make each run as its caller, revoke the role's EXECUTE on it, or give it (and the definers it calls) an owner row-level security binds", c.judged, strings.Join(names, "; "))
}

// through reports whether a definer whose owner row-level security binds
// may reach racefree's tables as another that it does not: whether its
// owner can run, directly or through other definers (via), a definer of
// an unbound owner that the follower reports. The follower names one
// shortest path to each table, not every function a body calls, so any
// such definer counts, whether or not a reported path names it; that
// one is reported too when the role can run it, and fixing it clears
// both.
func through(via []string, problems map[string][]rlscheck.Finding) bool {
	for _, v := range via {
		if len(problems[v]) > 0 {
			return true
		}
	}
	return false
}

// counted reports whether the checking session counts the rows its
// statements change (track_counts), which the analysis checks read.
// Without the counts they cannot judge: analyze-not-judged, a warning,
// stands in for never-analyzed, stale-statistics and autovacuum-off.
func (c *checker) counted(ctx context.Context) bool {
	var on bool
	if err := c.q.QueryRowContext(ctx, countsSQL).Scan(&on); err != nil {
		c.notJudged(AnalyzeNotJudged, "whether racefree's tables' statistics are current", err)
		return false
	}
	if !on {
		c.add(AnalyzeNotJudged, Warn, "ALTER SYSTEM SET track_counts = on; SELECT pg_reload_conf(); (and drop any ALTER ROLE or ALTER DATABASE … SET track_counts = off)",
			"track_counts is off for this session: PostgreSQL does not count the rows its statements change, so whether racefree's tables were analyzed and their statistics are current cannot be judged, and autovacuum, which acts on those counts, does not analyze or vacuum for them")
	}
	return on
}

func (c *checker) analyze(ctx context.Context) {
	var names []string
	if !c.each(ctx, analyzeSQL, AnalyzeNotJudged, "whether racefree's tables were analyzed", func(rows *sql.Rows) error {
		var name string
		if err := rows.Scan(&name); err != nil {
			return err
		}
		names = append(names, name)
		return nil
	}) {
		return
	}
	if len(names) > 0 {
		c.add(NeverAnalyzed, Info, "ANALYZE "+strings.Join(names, ", ")+";",
			"%s hold rows and were never analyzed, by hand or by autovacuum: the planner guesses their size", strings.Join(names, ", "))
	}
}

// statistics reports racefree's tables whose statistics fell behind
// their rows (stale-statistics) and the autovacuum that would keep them
// in step turned off (autovacuum-off), both of severity info: no
// guarantee depends on them, but PostgreSQL keeps a generic plan it
// cached for a prepared statement until the statistics of a table it
// reads change, however large the table grows meanwhile. A batch of
// claims planned while the table held a few hundred rows went on joining
// its arrays to a sequential scan of the whole table: in the claims
// bench, on a server with autovacuum off, the server spent 450 µs to 2
// ms of CPU a pair instead of about 100 (docs/performance.md).
func (c *checker) statistics(ctx context.Context) {
	var stale, off []string
	serverOff := false
	if !c.each(ctx, statisticsSQL, AnalyzeNotJudged, "whether racefree's tables' statistics are current", func(rows *sql.Rows) error {
		var name string
		var s, o, so bool
		if err := rows.Scan(&name, &s, &o, &so); err != nil {
			return err
		}
		if s {
			stale = append(stale, name)
		}
		if o {
			off = append(off, name)
		}
		serverOff = serverOff || so
		return nil
	}) {
		return
	}
	if len(stale) > 0 {
		c.add(StaleStatistics, Info, "ANALYZE "+strings.Join(stale, ", ")+";",
			"%s changed by more rows since their last ANALYZE than they held then: the planner plans them by a size they outgrew, and keeps the plans it cached for racefree's statements until their statistics change (a batch of claims may read the whole table)", strings.Join(stale, ", "))
	}
	var what, fix []string
	if serverOff {
		what = append(what, "autovacuum is off on the server")
		fix = append(fix, "ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf();")
	}
	if len(off) > 0 {
		what = append(what, strings.Join(off, ", ")+" turn it off (autovacuum_enabled)")
		for _, t := range off {
			fix = append(fix, "ALTER TABLE "+t+" RESET (autovacuum_enabled);")
		}
	}
	if len(what) > 0 {
		c.add(AutovacuumOff, Info, strings.Join(fix, " "),
			"%s: racefree's tables are analyzed and vacuumed only by hand, so their statistics fall behind as they grow (stale-statistics) and their dead rows stay", strings.Join(what, "; "))
	}
}

// probeRounds is how many statements each of the pooler probe's two
// sessions runs, alternating.
const probeRounds = 3

func (c *checker) pooler(ctx context.Context) {
	if c.q.Stats().MaxOpenConnections == 1 {
		c.add(PoolerNotJudged, Warn, "", "could not judge whether a pooler shares server sessions: the probe needs two connections and the pool holds one")
		return
	}
	a, err := c.q.Conn(ctx)
	if err != nil {
		c.notJudged(PoolerNotJudged, "whether a pooler shares server sessions", err)
		return
	}
	defer a.Close()
	b, err := c.q.Conn(ctx)
	if err != nil {
		c.notJudged(PoolerNotJudged, "whether a pooler shares server sessions", err)
		return
	}
	defer b.Close()
	var mode pgx.QueryExecMode
	seen := map[int64]*sql.Conn{}
	shared := false
	for i := 0; i < probeRounds && !shared; i++ {
		for _, conn := range []*sql.Conn{b, a} {
			pid, m, err := backend(ctx, conn)
			if err != nil {
				c.notJudged(PoolerNotJudged, "whether a pooler shares server sessions", err)
				return
			}
			mode = m
			// A server process seen by the other session, or a session
			// that sees a second one: sessions are not servers.
			if other, ok := seen[pid]; ok && other != conn {
				shared = true
			}
			for p, s := range seen {
				if s == conn && p != pid {
					shared = true
				}
			}
			seen[pid] = conn
		}
	}
	if shared && mode == pgx.QueryExecModeCacheStatement {
		c.add(PoolerPreparedStatements, Error, "add default_query_exec_mode=exec to the DSN",
			"a pooler hands this pool's sessions server processes per transaction (a transaction or statement pool, such as PgBouncer's pool_mode = transaction), and the DSN prepares statements (pgx's default_query_exec_mode=cache_statement): statements fail with \"prepared statement … does not exist\" or \"already exists\"")
	}
}

// backend returns the server process behind conn, asked without a
// prepared statement (so that the probe works through the pooler it
// looks for), and the connection's query exec mode.
func backend(ctx context.Context, conn *sql.Conn) (int64, pgx.QueryExecMode, error) {
	var pid int64
	var mode pgx.QueryExecMode
	err := conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("not a pgx connection: %T", dc)
		}
		mode = sc.Conn().Config().DefaultQueryExecMode
		return sc.Conn().QueryRow(ctx, backendSQL, pgx.QueryExecModeSimpleProtocol).Scan(&pid)
	})
	return pid, mode, err
}

func (c *checker) sqlite(ctx context.Context) {
	var journal string
	var sync int
	if err := c.q.QueryRowContext(ctx, sqliteDurabilitySQL).Scan(&journal, &sync); err != nil {
		c.notJudged(SQLiteNotJudged, "the journal mode and synchronous level", err)
		return
	}
	journal = strings.ToLower(journal)
	levels := map[int]string{0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
	level, ok := levels[sync]
	if !ok {
		c.add(SQLiteNotJudged, Warn, "", "could not judge synchronous level %d: not one SQLite documents", sync)
		return
	}
	switch journal {
	case "off", "memory":
		c.add(SQLiteJournalUnsafe, Error, "PRAGMA journal_mode = WAL; (racefree's default)",
			"journal_mode is %s: a crash of the process or the system in the middle of a transaction may corrupt the file", strings.ToUpper(journal))
	case "wal", "delete", "truncate", "persist":
	default:
		c.add(SQLiteNotJudged, Warn, "", "could not judge journal_mode %q: not one SQLite documents", journal)
		return
	}
	switch {
	case level == "OFF":
		c.add(SQLiteSynchronousOff, Error, "PRAGMA synchronous = FULL; (or NORMAL with WAL, racefree's default)",
			"synchronous is OFF: SQLite does not wait for the disk, so an operating system crash or a power loss may lose commits and corrupt the file")
	case level == "NORMAL" && journal == "wal":
		c.add(SQLiteWALNormal, Info, "PRAGMA synchronous = FULL; if the last commits must survive a power loss",
			"journal_mode WAL with synchronous NORMAL (racefree's default): an operating system crash or a power loss may lose the last commits, but the file stays consistent")
	case level == "NORMAL":
		c.add(SQLiteRollbackNormal, Warn, "PRAGMA journal_mode = WAL; (racefree's default) or PRAGMA synchronous = FULL;",
			"journal_mode %s with synchronous NORMAL: a power loss at the wrong moment may corrupt the file", strings.ToUpper(journal))
	}
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
