-- analyze: racefree's tables in the current schema that hold rows
-- (n_live_tup, from the statistics collector, which counts inserts without
-- an ANALYZE) and were never analyzed, by hand or by autovacuum: the
-- planner then guesses their size and the spread of their keys.
SELECT relname
  FROM pg_stat_user_tables
 WHERE schemaname = current_schema()
   AND relname LIKE 'racefree\_%'
   AND n_live_tup > 0
   AND last_analyze IS NULL
   AND last_autoanalyze IS NULL
 ORDER BY relname
