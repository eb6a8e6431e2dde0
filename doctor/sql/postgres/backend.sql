-- backend: the server process behind the statement. Two sessions that see
-- the same one, or one session that sees two, are not talking to
-- PostgreSQL directly but through a pooler that hands servers out per
-- transaction (or per statement).
SELECT pg_backend_pid()
