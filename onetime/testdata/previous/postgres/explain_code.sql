-- explain_code: read why consume matched no row (used, revoked, expired,
-- or no code of this purpose). It only explains a refusal that consume
-- already decided; it never decides anything.
-- $1 tenant, $2 hash, $3 purpose, $4 clock
SELECT c.subject, c.issued_at, c.expires_at, c.used_at, c.revoked_at,
  COALESCE($4::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) AS now
FROM racefree_onetime_codes AS c
WHERE c.tenant = $1 AND c.hash = $2 AND c.purpose = $3
