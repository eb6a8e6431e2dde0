-- statistics: what keeps the planner's statistics of racefree's tables
-- (in the schema where the search path finds racefree's migration
-- ledger) in step with their rows, one row per table:
--   stale: the table was analyzed (by hand or by autovacuum) and has
--     changed since by at least 1,000 rows and by more rows than it held
--     then (n_mod_since_analyze, the rows inserted, updated or deleted
--     since its last ANALYZE, against reltuples, its rows at that
--     ANALYZE): the planner plans it by a size it outgrew;
--   off: the table's own autovacuum_enabled storage parameter turns
--     autovacuum off for it. PostgreSQL keeps the value as written (fa,
--     OF, 0: any spelling it takes for false), so it is read with
--     PostgreSQL's own boolean cast, never matched against a list;
--   server_off: the server's autovacuum setting is off, which stops it
--     on every table.
-- A table never analyzed is analyze.sql's (never-analyzed), not stale.
SELECT s.relname,
       (s.last_analyze IS NOT NULL OR s.last_autoanalyze IS NOT NULL)
         AND s.n_mod_since_analyze >= 1000
         AND s.n_mod_since_analyze > GREATEST(c.reltuples, 0) AS stale,
       COALESCE((SELECT NOT o.option_value::boolean FROM pg_options_to_table(c.reloptions) AS o
                  WHERE o.option_name = 'autovacuum_enabled'), false) AS off,
       NOT current_setting('autovacuum')::boolean AS server_off
  FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
 WHERE c.relnamespace = (SELECT t.relnamespace FROM pg_class t WHERE t.oid = to_regclass('racefree_schema_migrations'))
   AND s.relname LIKE 'racefree\_%'
 ORDER BY s.relname
