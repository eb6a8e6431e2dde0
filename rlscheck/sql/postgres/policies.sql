-- policies: every policy on a table of the checked schemas or on a parent of
-- a tenant table (parents.sql; the caller keeps those on tenant tables and
-- parents), with its expressions as PostgreSQL prints them.
-- $1 schemas (text[]), $2 application role ('' for none), $3 the parents
-- (bigint[])
--
-- polcmd: r SELECT, a INSERT, w UPDATE, d DELETE, * ALL.
-- polpermissive: permissive policies are ORed, restrictive ones ANDed.
-- pg_get_expr: the USING and WITH CHECK expressions as SQL text (NULL when
-- the policy has none), which the caller parses.
-- applies: the policy applies to the application role: it is for PUBLIC
-- (role 0), or for a role the application role is a member of, INHERIT or
-- not (pg_has_role … 'MEMBER'): PostgreSQL applies the policies of the
-- roles whose privileges the current role has, and a NOINHERIT member
-- gets those of its group after one SET ROLE (from PostgreSQL 16 a
-- membership WITH SET FALSE INHERIT FALSE counts too: more is checked,
-- never less). Without a role every policy applies. A
-- superuser has every role's privileges but is subject to no policy: for
-- one, only the policies for PUBLIC or the role by name are checked. CASE,
-- because it evaluates in order: pg_has_role('') would fail.
SELECT p.polrelid::bigint, p.polname, p.polcmd::text, p.polpermissive,
       pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid),
       CASE WHEN $2 = '' OR 0::oid = ANY(p.polroles) THEN true
            WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = $2) THEN $2 = ANY(ARRAY(SELECT pg_get_userbyid(r) FROM unnest(p.polroles) r))
            ELSE EXISTS (SELECT 1 FROM unnest(p.polroles) r WHERE pg_has_role($2, r, 'MEMBER')) END
FROM pg_policy p
JOIN pg_class c ON c.oid = p.polrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY($1::text[]) OR p.polrelid = ANY($3::bigint[]::oid[])
ORDER BY p.polrelid, p.polname
