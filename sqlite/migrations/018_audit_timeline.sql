-- Audit chains across a failover: the column PostgreSQL's migration 018
-- adds to the head rows, for the timeline the chain's last entry was
-- appended on. SQLite has no timelines: it stays NULL, and nothing reads
-- it. Only an expansion, kept so that both engines have the same schema
-- versions.
ALTER TABLE racefree_audit_heads ADD COLUMN timeline BIGINT;
