-- rls: racefree's tables whose row-level security is not both enabled and
-- forced, in the schema where the search path finds racefree's migration
-- ledger (where racefree's own statements find its tables; not
-- current_schema(), which is the role's own schema when one is named
-- after it). Migration 012 (and each later migration for
-- its own tables) enables and forces it on every racefree_ table but the
-- migration ledger; a table without FORCE lets its owner read every
-- tenant's rows, one without ENABLE lets everyone.
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity
  FROM pg_class c
 WHERE c.relnamespace = (SELECT t.relnamespace FROM pg_class t WHERE t.oid = to_regclass('racefree_schema_migrations'))
   AND c.relname LIKE 'racefree\_%'
   AND c.relname <> 'racefree_schema_migrations'
   AND c.relkind IN ('r', 'p')
   AND NOT (c.relrowsecurity AND c.relforcerowsecurity)
 ORDER BY c.relname
