-- revoke_codes: revoke every live code of (purpose, subject), such as the
-- older password-reset links when a new one is sent. Used and expired
-- codes are left as they are. Consume's WHERE refuses a revoked code.
-- ?1 tenant, ?2 purpose, ?3 subject, ?4 clock
UPDATE racefree_onetime_codes AS c SET revoked_at = clock.now
FROM (SELECT COALESCE(?4, CAST(unixepoch('subsec') * 1000 AS INTEGER)) AS now) AS clock
WHERE c.tenant = ?1 AND c.purpose = ?2 AND c.subject = ?3
  AND c.used_at IS NULL AND c.revoked_at IS NULL AND clock.now < c.expires_at
