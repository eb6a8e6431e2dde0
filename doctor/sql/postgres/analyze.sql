-- analyze: racefree's tables, in the schema where the search path finds
-- racefree's migration ledger, that hold rows
-- (n_live_tup, from the statistics collector, which counts inserts without
-- an ANALYZE) and were never analyzed, by hand or by autovacuum: the
-- planner then guesses their size and the spread of their keys.
SELECT relname
  FROM pg_stat_user_tables
 WHERE relid IN (SELECT c.oid FROM pg_class c WHERE c.relnamespace = (SELECT t.relnamespace FROM pg_class t WHERE t.oid = to_regclass('racefree_schema_migrations')))
   AND relname LIKE 'racefree\_%'
   AND n_live_tup > 0
   AND last_analyze IS NULL
   AND last_autoanalyze IS NULL
 ORDER BY relname
