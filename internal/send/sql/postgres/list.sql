SELECT id FROM racefree_tenants ORDER BY id
