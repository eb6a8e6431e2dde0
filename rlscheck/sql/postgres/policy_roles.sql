-- policy_roles: the roles each policy on a table of the checked schemas is
-- for, so that a restrictive policy is credited only where PostgreSQL
-- applies it. A policy applies to a role that has the privileges of one of
-- polroles; 0 stands for PUBLIC, every role.
-- $1 schemas (text[])
--
-- public: the policy is for PUBLIC. roles: the other roles' oids, sorted,
-- as a JSON array.
SELECT p.polrelid::bigint, p.polname, 0::oid = ANY(p.polroles),
       array_to_json(ARRAY(SELECT r::bigint FROM unnest(p.polroles) r WHERE r <> 0 ORDER BY 1))::text
FROM pg_policy p
JOIN pg_class c ON c.oid = p.polrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ANY($1::text[])
