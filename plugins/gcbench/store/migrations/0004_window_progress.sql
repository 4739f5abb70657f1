-- Version 4: progress inside each trial's measured windows (gcbench.stability).
-- One row per recorded point: the cumulative steps finished by t_s (seconds on the
-- trial's time base, like samples.t_s and the window edges). The throughput-stability
-- rule of validation and anyone auditing a window read it from here or from
-- trials.result->'progress'.
CREATE TABLE gcbench.progress (
    trial_pk    bigint NOT NULL REFERENCES gcbench.trials (id) ON DELETE CASCADE,
    window_key  text NOT NULL,
    t_s         double precision NOT NULL,
    steps       bigint NOT NULL CHECK (steps >= 0),
    PRIMARY KEY (trial_pk, window_key, steps)
);
