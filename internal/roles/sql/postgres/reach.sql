-- reach (PostgreSQL 15 and earlier): every role that role $1 is, or can
-- become, that row-level security does not bind: a superuser, a role with
-- BYPASSRLS, one of the owners $2 (the owners of the tables the policies
-- guard), a role with CREATEROLE (before 16 it can grant itself any role
-- but a superuser), or one of the predefined roles that reach the
-- server's files or programs (pg_read_server_files,
-- pg_write_server_files, pg_execute_server_program: the data under the
-- policies is in those files). One row per such role, with how $1
-- reaches it. CREATEROLE is an attribute (SET ROLE only); the predefined
-- roles' rights, like an owner's, come by SET ROLE or by INHERIT.
-- $1 role name, $2 owner role names (text[])
--
-- Attributes (SUPERUSER, BYPASSRLS) are never inherited: a member gets
-- them by SET ROLE. Before PostgreSQL 16 every membership, direct or
-- through other roles, INHERIT or not, permits SET ROLE: that is
-- pg_has_role(…, 'MEMBER'). An owner's privileges (ALTER TABLE … DISABLE
-- ROW LEVEL SECURITY, and skipping policies that are not FORCEd) come
-- with SET ROLE too, or without it through INHERIT all the way:
-- pg_has_role(…, 'USAGE'). pg_has_role decides, as PostgreSQL itself
-- decides; the walk over pg_auth_members only names the path (a role's
-- memberships lead on to further roles only through INHERIT roles for
-- privileges, through every role for SET ROLE). A membership
-- pg_auth_members does not list (pg_database_owner's) gets no path: the
-- caller names the two ends.
--
-- The two paths (JSON arrays of names, [] when there is none) are the
-- shortest by SET ROLE and the shortest by INHERIT. The last two columns
-- (privileges only after SET ROLE to a role that inherits them, and that
-- path) are reach16.sql's: before 16 a member can SET ROLE to every role
-- whose privileges it can use, so they are false and [].
--
-- A superuser is every role's member: for one, only its own row counts.
-- No row at all: the role does not exist (the first row is always $1's own
-- when it does, which the caller checks with exists).
WITH RECURSIVE me AS (
    SELECT oid, rolsuper FROM pg_roles WHERE rolname = $1
), walk(roleid, path, can_set, inherits) AS (
    SELECT oid, ARRAY[oid], true, true FROM me
    UNION ALL
    SELECT m.roleid, w.path || m.roleid, w.can_set, w.inherits AND r.rolinherit
      FROM walk w
      JOIN pg_auth_members m ON m.member = w.roleid
      JOIN pg_roles r ON r.oid = w.roleid
     WHERE m.roleid <> ALL (w.path)
)
SELECT t.rolname,
       t.oid = me.oid,
       t.rolsuper,
       t.rolbypassrls,
       t.rolname = ANY ($2::text[]),
       t.rolcreaterole,
       t.rolname IN ('pg_read_server_files', 'pg_write_server_files', 'pg_execute_server_program'),
       pg_has_role(me.oid, t.oid, 'MEMBER'),
       pg_has_role(me.oid, t.oid, 'USAGE'),
       to_json(ARRAY(SELECT pg_get_userbyid(x) FROM unnest(
           (SELECT w.path FROM walk w WHERE w.roleid = t.oid AND w.can_set ORDER BY cardinality(w.path) LIMIT 1)
       ) WITH ORDINALITY u(x, i) ORDER BY i))::text,
       to_json(ARRAY(SELECT pg_get_userbyid(x) FROM unnest(
           (SELECT w.path FROM walk w WHERE w.roleid = t.oid AND w.inherits ORDER BY cardinality(w.path) LIMIT 1)
       ) WITH ORDINALITY u(x, i) ORDER BY i))::text,
       false,
       '[]'
  FROM me
  JOIN pg_roles t ON t.oid = me.oid OR NOT me.rolsuper
 WHERE t.oid = me.oid
    OR ((t.rolsuper OR t.rolbypassrls OR t.rolcreaterole OR t.rolname = ANY ($2::text[])
         OR t.rolname IN ('pg_read_server_files', 'pg_write_server_files', 'pg_execute_server_program'))
        AND pg_has_role(me.oid, t.oid, 'MEMBER'))
 ORDER BY t.oid <> me.oid, t.rolname
