-- Whether row-level security binds the current role: a superuser and a
-- role with BYPASSRLS are exempt from every policy, FORCE included.
SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user
