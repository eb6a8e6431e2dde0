-- rls: racefree's tables in the current schema whose row-level security is
-- not both enabled and forced. Migration 012 (and each later migration for
-- its own tables) enables and forces it on every racefree_ table but the
-- migration ledger; a table without FORCE lets its owner read every
-- tenant's rows, one without ENABLE lets everyone.
SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity
  FROM pg_class c
 WHERE c.relnamespace = to_regnamespace(current_schema())
   AND c.relname LIKE 'racefree\_%'
   AND c.relname <> 'racefree_schema_migrations'
   AND c.relkind IN ('r', 'p')
   AND NOT (c.relrowsecurity AND c.relforcerowsecurity)
 ORDER BY c.relname
