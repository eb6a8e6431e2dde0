INSERT INTO racefree_tenants (id, created_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING
