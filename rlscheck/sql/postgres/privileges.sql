-- privileges: the grants, on the tenant tables and their parents, of the
-- privileges that row-level security does not bind:
--   TRUNCATE   empties the table, every tenant's rows (and, on a parent,
--              its children's): no policy applies to TRUNCATE;
--   TRIGGER    a trigger the grantee creates on the table runs on every
--              tenant's rows as other sessions write them, NEW and OLD whole;
--   REFERENCES a foreign key the grantee declares to the table checks its
--              keys past the policies: it tells which keys exist.
-- $1 the tables (bigint[]), $2 application role ('' for every grantee)
--
-- aclexplode lists the explicit grants only: the owner's own rights are
-- judged as ownership (role_owns_table), and a table without grants has a
-- NULL relacl and none. With a role, the grants that reach it: to PUBLIC
-- or to a role it is a member of (INHERIT or not, as policies.sql), and
-- for a superuser (reported as one already) the grants naming it or
-- PUBLIC only. Without a role, every grantee but the owner.
SELECT c.oid::bigint,
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
       a.privilege_type
FROM pg_class c, aclexplode(c.relacl) a
WHERE c.oid = ANY($1::bigint[]::oid[])
  AND a.privilege_type IN ('TRUNCATE', 'TRIGGER', 'REFERENCES')
  AND a.grantee <> c.relowner
  AND CASE WHEN $2 = '' OR a.grantee = 0 THEN true
           WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = $2) THEN pg_get_userbyid(a.grantee) = $2
           ELSE pg_has_role($2, a.grantee, 'MEMBER') END
ORDER BY 1, 2, array_position(ARRAY['TRUNCATE', 'TRIGGER', 'REFERENCES'], a.privilege_type)
