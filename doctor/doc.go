// Package doctor checks what the database racefree runs on does to the
// guarantees racefree gives: whether a commit it acknowledges is durable,
// whether row-level security binds the role it serves as, whether the
// schema and the statistics are current, and whether a pooler in front of
// PostgreSQL breaks prepared statements. It is the library behind
// `racefree doctor`, and `racefree serve` runs it at start.
//
// Check reads only: settings (current_setting, SQLite pragmas), the
// catalogue (pg_class, pg_roles, pg_auth_members), the statistics views
// (pg_stat_replication, pg_stat_user_tables) and the migration ledger. It
// changes nothing.
//
// "Ok" means proven (DESIGN invariant 13): a check that cannot read what
// it needs reports <check>-not-judged, never nothing. A Report without
// findings of severity warn or error proves, as of the moment of the
// check and as the checking session sees it, each of these:
//
// PostgreSQL
//   - fsync and full_page_writes are on (fsync-off, full-page-writes-off:
//     a crash or a power loss may corrupt the cluster);
//   - synchronous_commit is not off (synchronous-commit-off: a crash of
//     the server loses the last commits it acknowledged), for the checking
//     session or, with Options.Role naming another role, for that role's
//     sessions: what ALTER ROLE … IN DATABASE, ALTER ROLE, ALTER
//     DATABASE or ALTER ROLE ALL … SET gives them, most specific first,
//     else the server's value, which is settings-not-judged when the
//     checking session has a value of its own that hides it (from its
//     role, its DSN or a SET);
//   - when standbys stream from the server (a row in pg_stat_replication,
//     which every role sees), a standby waits for each commit:
//     synchronous_standby_names is set and synchronous_commit is neither
//     off nor local (no-standby-waits: a failover may lose acknowledged
//     commits); when synchronous_standby_names is set, as many streaming
//     standbys as it waits for (ANY 2 (…): two) are sync or in the quorum
//     (sync-standby-not-streaming: commits wait, possibly for ever); a
//     role that sees no sync_state (neither a superuser nor a member of
//     pg_read_all_stats) gets replication-not-judged for the latter;
//   - for a DB with racefree.Config.RequireSynchronousReplication, that
//     the check every write begins with passes now (tenant.CheckDurable;
//     strict-refuses-writes, with the reason, when writes are refused);
//   - the role (Options.Role, else the connecting role) is not, and cannot
//     become through its memberships, a superuser, a BYPASSRLS role, an
//     owner of racefree's tables or a CREATEROLE role, and has not the
//     rights of a predefined role of the server's files or programs
//     (role-is-superuser, role-bypasses-rls, role-owns-tables,
//     role-creates-roles, role-reaches-server-files: internal/roles, as
//     `migrate up --app-role` judges);
//   - from schema version 12 (tenants) on, every racefree_ table but the
//     migration ledger has row-level security enabled and forced
//     (rls-not-forced), in the schema where the search path finds the
//     ledger, as racefree's own statements find its tables (not
//     current_schema(), which is a role's own schema when one is named
//     after it; the ownership and analysis checks look there too);
//   - the role holds no privilege row-level security does not bind on those
//     tables, itself, through a role it is a member of, or as PUBLIC
//     (privilege-escapes-rls, with each REVOKE: TRUNCATE empties every
//     tenant's rows, TRIGGER runs the grantee's trigger on every tenant's
//     rows as they are written, REFERENCES tells which keys exist);
//   - the role reads no racefree table through a view or materialized
//     view (or a view over one) whose owner row-level security does not
//     bind: a superuser, a BYPASSRLS role, a role with the privileges of
//     the table's owner where it is not forced (view-escapes-rls: a view
//     reads with its owner's privileges, and hands the role every
//     tenant's rows);
//   - the role can run no SECURITY DEFINER function or procedure, itself,
//     through a role it is a member of, as PUBLIC, or as a trigger, whose
//     body may run as a role row-level security does not bind (its
//     owner one of the same three, or one that can run, through other
//     definers, such a role's definer that reaches a racefree table) and
//     which reaches a racefree table at any depth, or cannot be followed there
//     (definer-escapes-rls: it runs with its owner's rights; rls-check's
//     follower reads the bodies, which pg_depend does not record);
//   - a racefree_ table that holds rows has been analyzed (never-analyzed,
//     severity info: the planner guesses its size);
//   - a racefree_ table analyzed once has not changed since by 1,000 rows
//     or more and by more rows than it held then (stale-statistics,
//     severity info: PostgreSQL keeps the plans it cached for racefree's
//     statements until the statistics change, and a batch planned on a
//     small table may read the whole table), and autovacuum, which keeps
//     them current, is on for the server and for each racefree_ table
//     (autovacuum-off, severity info);
//   - the checking session counts the rows its statements change
//     (track_counts), which the three checks above read: off, they are
//     not judged (analyze-not-judged, a warning);
//   - two sessions of the pool never share a server process and one never
//     changes it, unless the pool's statements are not prepared
//     (pooler-prepared-statements: a pooler in transaction or statement
//     mode with pgx's default cache_statement mode fails with "prepared
//     statement does not exist" or "already exists").
//
// SQLite
//   - synchronous is not OFF (sqlite-synchronous-off: an operating system
//     crash or a power loss may corrupt the file);
//   - the journal is not OFF or MEMORY (sqlite-journal-unsafe: a crash in
//     the middle of a transaction may corrupt the file);
//   - a rollback journal (DELETE, TRUNCATE, PERSIST) runs with synchronous
//     FULL or EXTRA (sqlite-rollback-normal: with NORMAL a power loss may
//     corrupt the file).
//   - WAL with synchronous NORMAL, racefree's default, is reported as
//     sqlite-wal-normal, severity info: a power loss may lose the last
//     commits, the file stays consistent. FULL or EXTRA: durable, nothing
//     to report.
//
// Both engines: the schema is at the binary's version (schema-behind,
// schema-ahead).
//
// What it cannot prove: settings made for another role or database than
// the checking session's (ALTER ROLE … SET synchronous_commit) are not
// seen, so run it as the role the application connects as, or read the
// finding as the checking role's; a setting changed after the check; a
// disk or a controller that acknowledges writes it has not made durable
// (fsync on proves the request, not the hardware); a pooler in session
// mode, which breaks nothing racefree does, and a transaction pooler that
// happened to hand the probe's two sessions distinct servers each time
// (the probe alternates six statements between two sessions: PgBouncer
// hands the server it released last to the next transaction, so it shows).
package doctor
