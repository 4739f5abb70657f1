-- GC-Bench results schema, version 1.
-- Every energy is in joules, power in watts, time in seconds. NULL means unknown.
-- the schema exists already: db.migrate() makes it, or deploy/postgres/init.sql gives it to the results role

CREATE TABLE gcbench.plans (
    plan_name   text PRIMARY KEY,
    plan_sha256 text NOT NULL,
    plan        jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE gcbench.dag_runs (
    id            bigserial PRIMARY KEY,
    plan_name     text NOT NULL REFERENCES gcbench.plans (plan_name),
    dag_id        text NOT NULL,
    run_id        text NOT NULL,
    logical_date  timestamptz,
    params        jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (dag_id, run_id)
);
CREATE INDEX dag_runs_logical_date ON gcbench.dag_runs (plan_name, logical_date);

CREATE TABLE gcbench.trials (
    id               bigserial PRIMARY KEY,
    dag_run_id       bigint NOT NULL REFERENCES gcbench.dag_runs (id) ON DELETE CASCADE,
    trial_id         text NOT NULL,
    plan_name        text NOT NULL,
    variant          text NOT NULL,
    workload         text NOT NULL,
    kind             text NOT NULL,
    repetition       integer NOT NULL,
    spec             jsonb NOT NULL,
    status           text NOT NULL CHECK (status IN ('ok', 'failed', 'skipped')),
    exit_code        integer,
    error            text,
    log_tail         text,
    result           jsonb,
    samples_count    bigint NOT NULL DEFAULT 0,
    samples_partial  boolean NOT NULL DEFAULT false,
    simulated        boolean NOT NULL DEFAULT false,
    gpu_method       text,
    cpu_method       text,
    valid            boolean,
    reasons          jsonb NOT NULL DEFAULT '[]'::jsonb,
    flags            jsonb NOT NULL DEFAULT '[]'::jsonb,
    started_at       timestamptz,
    finished_at      timestamptz,
    collected_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (dag_run_id, trial_id)
);
CREATE INDEX trials_plan_variant ON gcbench.trials (plan_name, variant);

CREATE TABLE gcbench.samples (
    trial_pk              bigint NOT NULL REFERENCES gcbench.trials (id) ON DELETE CASCADE,
    t_s                   double precision NOT NULL,
    device                text NOT NULL,
    source                text NOT NULL,
    power_w               double precision,
    power_instant_w       double precision,
    energy_j              double precision,
    temperature_c         double precision,
    sm_clock_mhz          double precision,
    clocks_event_reasons  bigint
);
CREATE INDEX samples_trial ON gcbench.samples (trial_pk, t_s);

CREATE TABLE gcbench.metrics (
    trial_pk  bigint NOT NULL REFERENCES gcbench.trials (id) ON DELETE CASCADE,
    name      text NOT NULL,
    value     double precision,
    text_value text,
    unit      text,
    PRIMARY KEY (trial_pk, name)
);

CREATE TABLE gcbench.reports (
    dag_run_id  bigint PRIMARY KEY REFERENCES gcbench.dag_runs (id) ON DELETE CASCADE,
    html_path   text NOT NULL,
    md_path     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
