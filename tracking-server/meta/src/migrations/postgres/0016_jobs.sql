-- PostgreSQL version of ../0016_jobs.sql: INTEGER -> BIGINT, REAL -> DOUBLE PRECISION, no WITHOUT ROWID.
--
-- The job a run follows: the processes that joined it (one per rank), grouped in attempts (each
-- start of the job: the first, and every restart after a preemption, a failure or a requeue),
-- with the nodes each attempt ran on and what they cost.

-- One start of the job. `key` holds what the launcher says about this start (its restart count,
-- the cluster, the zone, the world size and node count): a process with another key starts a
-- new attempt. `status` is running, finished, failed, killed, preempted or lost (its processes
-- stopped sending heartbeats and the job started again).
CREATE TABLE run_attempts (
    run_id        TEXT    NOT NULL,
    number        BIGINT  NOT NULL,
    key           TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    start_ms      BIGINT  NOT NULL,
    end_ms        BIGINT ,
    launcher      TEXT    NOT NULL,
    job_id        TEXT,
    world_size    BIGINT  NOT NULL,
    node_count    BIGINT  NOT NULL,
    cloud         TEXT,
    region        TEXT,
    zone          TEXT,
    instance_type TEXT,
    cluster       TEXT,
    spot          BIGINT ,
    PRIMARY KEY (run_id, number)
);

-- One process of an attempt: its rank, where it ran, its last heartbeat (`seen_ms`), the steps
-- it logged, how it ended, and the job context as it detected it (JSON).
CREATE TABLE run_processes (
    run_id     TEXT    NOT NULL,
    attempt    BIGINT  NOT NULL,
    rank       BIGINT  NOT NULL,
    local_rank BIGINT  NOT NULL,
    node_rank  BIGINT  NOT NULL,
    host       TEXT    NOT NULL,
    pid        BIGINT ,
    status     TEXT    NOT NULL,
    start_ms   BIGINT  NOT NULL,
    seen_ms    BIGINT  NOT NULL,
    end_ms     BIGINT ,
    first_step BIGINT ,
    last_step  BIGINT ,
    reason     TEXT,
    last_lines TEXT,
    context    TEXT    NOT NULL,
    PRIMARY KEY (run_id, attempt, rank)
);

-- One node of an attempt, as its first process described it: GPUs, driver, and the price of
-- the node per hour with where the price came from (NULL: not priced).
CREATE TABLE run_nodes (
    run_id       TEXT    NOT NULL,
    attempt      BIGINT  NOT NULL,
    node_rank    BIGINT  NOT NULL,
    host         TEXT    NOT NULL,
    gpus         BIGINT  NOT NULL,
    gpu_names    TEXT    NOT NULL,
    driver       TEXT,
    usd_per_hour DOUBLE PRECISION,
    price_source TEXT,
    PRIMARY KEY (run_id, attempt, node_rank)
);

-- A run's job in one row, for lists and search: rewritten when a process joins or an attempt
-- ends. The live cost is computed when read.
CREATE TABLE run_jobs (
    run_id         TEXT    PRIMARY KEY,
    launcher       TEXT    NOT NULL,
    job_id         TEXT,
    world_size     BIGINT  NOT NULL,
    node_count     BIGINT  NOT NULL,
    attempts       BIGINT  NOT NULL,
    gpus           BIGINT  NOT NULL,
    lost_usd       DOUBLE PRECISION    NOT NULL,
    lost_gpu_hours DOUBLE PRECISION    NOT NULL,
    steps_replayed BIGINT  NOT NULL
);
