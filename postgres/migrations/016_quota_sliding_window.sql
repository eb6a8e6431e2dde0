-- Quotas: the sliding-window counter (kind 'sliding_window'). Its row holds
-- the start of the current window in tat, the units charged in it in used,
-- and those of the window before in prev, a new column: NULL on the rows
-- of the other kinds, which never read it. The kind CHECK is widened (the
-- new one admits every row the old one did); the previous release's
-- statements keep working.
ALTER TABLE racefree_quotas ADD COLUMN prev BIGINT;
ALTER TABLE racefree_quotas DROP CONSTRAINT racefree_quotas_kind_check;
ALTER TABLE racefree_quotas ADD CONSTRAINT racefree_quotas_kind_check CHECK (kind IN ('gcra', 'window', 'sliding_window'));
