-- reach (PostgreSQL 16 and later; racefree's own tests, whose server is
-- 15, run it only on an emulated catalogue): every role that role $1 is, or can become, that
-- row-level security does not bind: a superuser, a role with BYPASSRLS,
-- one of the owners $2 (the owners of the tables the policies guard), a
-- role with CREATEROLE, or one of the predefined roles that reach the
-- server's files or programs (pg_read_server_files,
-- pg_write_server_files, pg_execute_server_program). One row per such
-- role, with how $1 reaches it. From 16 a CREATEROLE role administers only
-- the roles it created (and those granted to it WITH ADMIN); what those
-- reach is not judged here, so CREATEROLE is reported, never passed.
-- CREATEROLE is an attribute (SET ROLE only); the predefined roles'
-- rights, like an owner's, come by SET ROLE or by INHERIT.
-- $1 role name, $2 owner role names (text[])
--
-- Since PostgreSQL 16 each grant of a membership says whether it permits
-- SET ROLE (set_option) and whether it passes on privileges
-- (inherit_option). Attributes (SUPERUSER, BYPASSRLS) are never
-- inherited: a member gets them only by SET ROLE, which needs SET on every
-- grant of the chain: pg_has_role(…, 'SET'). An owner's privileges
-- (ALTER TABLE … DISABLE ROW LEVEL SECURITY, and skipping policies that
-- are not FORCEd) come with SET ROLE too, or without it through INHERIT
-- on every grant: pg_has_role(…, 'USAGE'). A member with SET FALSE
-- and INHERIT TRUE of the owner therefore still counts.
--
-- pg_has_role does not answer two more ways, which the walk follows:
--   - SET ROLE, then INHERIT (acts): after SET ROLE to a role, the member
--     has that role's privileges, those it inherits among them: a chain
--     of SET grants followed by INHERIT grants gives the owner's
--     privileges though neither 'SET' nor 'USAGE' reaches the owner.
--   - ADMIN OPTION: a role whose privileges the member can use and that
--     holds a grant WITH ADMIN OPTION can grant that role to the member,
--     WITH SET TRUE: the member can then SET ROLE to it (PostgreSQL's
--     documentation: SET FALSE, INHERIT FALSE "is a safeguard against
--     accidents, not a security feature"). Such a role counts as one it
--     can SET ROLE to.
-- A membership pg_auth_members does not list (pg_database_owner's) gets
-- no path: the caller names the two ends.
--
-- The three paths (JSON arrays of names, [] when there is none) are the
-- shortest by SET ROLE, the shortest by INHERIT and the shortest by which
-- the member has the role's privileges, after SET ROLE where needed.
--
-- A superuser is every role's member: for one, only its own row counts.
-- No row at all: the role does not exist (the first row is always $1's own
-- when it does).
WITH RECURSIVE me AS (
    SELECT oid, rolsuper FROM pg_roles WHERE rolname = $1
), walk(roleid, path, can_set, inherits, acts) AS (
    SELECT oid, ARRAY[oid], true, true, true FROM me
    UNION ALL
    SELECT m.roleid, w.path || m.roleid,
           w.can_set AND m.set_option OR w.acts AND m.admin_option,
           w.inherits AND m.inherit_option,
           w.can_set AND m.set_option OR w.acts AND (m.admin_option OR m.inherit_option)
      FROM walk w
      JOIN pg_auth_members m ON m.member = w.roleid
     WHERE m.roleid <> ALL (w.path)
       AND (w.can_set AND m.set_option OR w.acts AND (m.admin_option OR m.inherit_option))
), reached AS (
    SELECT t.oid, t.rolname,
           t.oid = me.oid AS self,
           t.rolsuper, t.rolbypassrls,
           t.rolname = ANY ($2::text[]) AS owns,
           t.rolcreaterole,
           t.rolname IN ('pg_read_server_files', 'pg_write_server_files', 'pg_execute_server_program') AS files,
           pg_has_role(me.oid, t.oid, 'SET')
               OR EXISTS (SELECT FROM walk w WHERE w.roleid = t.oid AND w.can_set) AS can_set,
           pg_has_role(me.oid, t.oid, 'USAGE') AS inherits,
           EXISTS (SELECT FROM walk w WHERE w.roleid = t.oid AND w.acts) AS acts
      FROM me
      JOIN pg_roles t ON t.oid = me.oid OR NOT me.rolsuper
)
SELECT r.rolname, r.self, r.rolsuper, r.rolbypassrls, r.owns, r.rolcreaterole, r.files,
       r.can_set, r.inherits,
       to_json(ARRAY(SELECT pg_get_userbyid(x) FROM unnest(
           (SELECT w.path FROM walk w WHERE w.roleid = r.oid AND w.can_set ORDER BY cardinality(w.path) LIMIT 1)
       ) WITH ORDINALITY u(x, i) ORDER BY i))::text,
       to_json(ARRAY(SELECT pg_get_userbyid(x) FROM unnest(
           (SELECT w.path FROM walk w WHERE w.roleid = r.oid AND w.inherits ORDER BY cardinality(w.path) LIMIT 1)
       ) WITH ORDINALITY u(x, i) ORDER BY i))::text,
       r.acts,
       to_json(ARRAY(SELECT pg_get_userbyid(x) FROM unnest(
           (SELECT w.path FROM walk w WHERE w.roleid = r.oid AND w.acts ORDER BY cardinality(w.path) LIMIT 1)
       ) WITH ORDINALITY u(x, i) ORDER BY i))::text
  FROM reached r
 WHERE r.self
    OR ((r.rolsuper OR r.rolbypassrls OR r.rolcreaterole) AND r.can_set)
    OR ((r.owns OR r.files) AND (r.can_set OR r.inherits OR r.acts))
 ORDER BY NOT r.self, r.rolname
