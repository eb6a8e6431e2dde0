-- owners: the roles that own racefree's tables (racefree_%) in the schema
-- where the search path finds racefree's migration ledger (where
-- racefree's own statements find its tables; not current_schema(), which
-- is the role's own schema when one is named after it): whoever can act as
-- one of them can ALTER a table's row-level security away. None before the
-- first migration.
SELECT DISTINCT pg_get_userbyid(c.relowner)
  FROM pg_class c
 WHERE c.relnamespace = (SELECT t.relnamespace FROM pg_class t WHERE t.oid = to_regclass('racefree_schema_migrations'))
   AND c.relname LIKE 'racefree\_%'
   AND c.relkind IN ('r', 'p')
 ORDER BY 1
