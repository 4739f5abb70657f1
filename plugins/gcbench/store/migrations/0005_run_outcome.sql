-- Version 5: what happened to a DAG run as a whole, beyond its trials.
-- notes: lines the report shows at its top, e.g. "Nothing to run: all 18 trials of this
--   run were already stored." or "Interrupted (SIGINT, Ctrl-C) after 12 of 18 trials."
-- interrupted_at: when `gcbench run` was told to stop (Ctrl-C); NULL for a run that
--   was not interrupted. An interrupted run is failed; running it again (same run id)
--   clears both once its missing trials ran.
ALTER TABLE gcbench.dag_runs ADD COLUMN IF NOT EXISTS notes jsonb NOT NULL DEFAULT '[]'::jsonb;
ALTER TABLE gcbench.dag_runs ADD COLUMN IF NOT EXISTS interrupted_at timestamptz;
