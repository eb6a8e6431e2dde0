-- The transaction's tenant, until it ends (is_local = true): never the
-- session's, which a pooled connection would carry to its next user.
SELECT set_config('racefree.tenant_id', $1, true)
