-- What makes a role unfit to be the application role: superuser,
-- BYPASSRLS, or owning (directly or through membership) racefree's tables.
SELECT r.rolsuper,
       r.rolbypassrls,
       pg_has_role(r.oid, c.relowner, 'USAGE')
  FROM pg_roles r,
       pg_class c
 WHERE r.rolname = $1
   AND c.oid = to_regclass('racefree_claims')
