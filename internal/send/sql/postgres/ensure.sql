-- The transaction's tenant: the one it has, or $1 set now for the rest of
-- the transaction. The caller compares the answer with $1.
SELECT COALESCE(NULLIF(current_setting('racefree.tenant_id', true), ''),
                set_config('racefree.tenant_id', $1, true))
