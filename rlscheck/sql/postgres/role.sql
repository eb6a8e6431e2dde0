-- role: whether the application role skips row-level security on its own:
-- a superuser and a BYPASSRLS role are never subject to policies, FORCE or
-- not. No row: the role does not exist.
-- $1 role
SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1
