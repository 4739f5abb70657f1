-- Version 6: a trial's named windows whose energy figures validation left out.
-- windows_withheld: {window key: reason}, e.g. {"eval": "window eval too short for the
--   sensor: 0.500 s < 10 update periods of 0.100 s (1.000 s)"}. The trial's main window
--   and its validity stand; the window's sensor figures (<window>_gpu_energy_j,
--   <window>_gpu_j_per_token, ...: gcbench.metrics.WINDOW_SENSOR_FIGURES) stay stored in
--   metrics but are not read into the statistics (gcbench.store.queries.trials_frame).
ALTER TABLE gcbench.trials ADD COLUMN IF NOT EXISTS windows_withheld jsonb NOT NULL DEFAULT '{}'::jsonb;
