SELECT MAX(version) FROM racefree_schema_migrations
