-- set_timeline: PostgreSQL's statement of the same name; SQLite has no
-- timelines, so Append never runs it.
-- ?1 tenant, ?2 scope, ?3 timeline
UPDATE racefree_audit_heads SET timeline = ?3 WHERE tenant = ?1 AND scope = ?2
