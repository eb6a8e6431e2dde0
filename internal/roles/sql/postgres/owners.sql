-- owners: the roles that own racefree's tables (racefree_%) in the current
-- schema: whoever can act as one of them can ALTER a table's row-level
-- security away. None before the first migration.
SELECT DISTINCT pg_get_userbyid(c.relowner)
  FROM pg_class c
 WHERE c.relnamespace = to_regnamespace(current_schema())
   AND c.relname LIKE 'racefree\_%'
   AND c.relkind IN ('r', 'p')
 ORDER BY 1
