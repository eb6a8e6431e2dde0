-- grants: privileges that row-level security does not bind, granted on
-- racefree's tables (those rls.sql judges) to the judged role ($1), to a
-- role it is a member of, or to PUBLIC. TRUNCATE empties every tenant's
-- rows; TRIGGER runs the grantee's trigger on every tenant's rows as they
-- are written; REFERENCES lets a foreign key tell which keys exist. The
-- owner's own are role-owns-tables'. A superuser is a member of every
-- role: its own grants alone are named (role-is-superuser says the rest).
-- One row per table, grantee and privilege.
SELECT c.relname,
       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
       a.privilege_type
  FROM pg_class c, aclexplode(c.relacl) a
 WHERE c.relnamespace = (SELECT t.relnamespace FROM pg_class t WHERE t.oid = to_regclass('racefree_schema_migrations'))
   AND c.relname LIKE 'racefree\_%'
   AND c.relname <> 'racefree_schema_migrations'
   AND c.relkind IN ('r', 'p')
   AND a.privilege_type IN ('TRUNCATE', 'TRIGGER', 'REFERENCES')
   AND a.grantee <> c.relowner
   AND CASE WHEN a.grantee = 0 THEN true
            WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = $1) THEN pg_get_userbyid(a.grantee) = $1
            ELSE pg_has_role($1, a.grantee, 'MEMBER') END
 ORDER BY 1, 2, array_position(ARRAY['TRUNCATE', 'TRIGGER', 'REFERENCES'], a.privilege_type)
