-- generic_plans: for the rest of the transaction (is_local = true), plan
-- prepared statements once per connection, not at each run. A batch of the
-- combiner whose statements run over arrays (racefree.Statement.Many)
-- opens with it: PostgreSQL would otherwise plan them afresh at every run,
-- because a plan for the arrays at hand looks cheaper than one for arrays
-- of any length, and planning them took longer than running them. The
-- generic plan reads the arrays' rows through the tables' keys all the
-- same. Never the session's setting, which a pooled connection would carry
-- to its next user.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true)
