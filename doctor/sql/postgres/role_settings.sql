-- role_settings: the synchronous_commit a session of role $1 in this
-- database starts with by ALTER ROLE … IN DATABASE … SET, ALTER ROLE …
-- SET, ALTER DATABASE … SET or ALTER ROLE ALL SET (pg_db_role_setting,
-- which every role may read), the most specific first, as PostgreSQL
-- applies them at login, and as it was written (off, false, 0 …); NULL
-- when none of them sets it, and the server's configuration applies. Then
-- where the checking session's own value comes from (pg_settings.source:
-- user, database user, client or session when it is this session's or
-- its role's own), and the checking role.
SELECT (SELECT substr(cfg, length('synchronous_commit=') + 1)
          FROM pg_db_role_setting AS s, unnest(s.setconfig) AS cfg
         WHERE cfg LIKE 'synchronous\_commit=%'
           AND s.setrole IN (0, (SELECT oid FROM pg_roles WHERE rolname = $1))
           AND s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
         ORDER BY s.setrole = 0, s.setdatabase = 0
         LIMIT 1),
       (SELECT source FROM pg_settings WHERE name = 'synchronous_commit'),
       current_user
