-- The job a run follows: the processes that joined it (one per rank), grouped in attempts (each
-- start of the job: the first, and every restart after a preemption, a failure or a requeue),
-- with the nodes each attempt ran on and what they cost.

-- One start of the job. `key` holds what the launcher says about this start (its restart count,
-- the cluster, the zone, the world size and node count): a process with another key starts a
-- new attempt. `status` is running, finished, failed, killed, preempted or lost (its processes
-- stopped sending heartbeats and the job started again).
CREATE TABLE run_attempts (
    run_id        TEXT    NOT NULL,
    number        INTEGER NOT NULL,
    key           TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    start_ms      INTEGER NOT NULL,
    end_ms        INTEGER,
    launcher      TEXT    NOT NULL,
    job_id        TEXT,
    world_size    INTEGER NOT NULL,
    node_count    INTEGER NOT NULL,
    cloud         TEXT,
    region        TEXT,
    zone          TEXT,
    instance_type TEXT,
    cluster       TEXT,
    spot          INTEGER,
    PRIMARY KEY (run_id, number)
) WITHOUT ROWID;

-- One process of an attempt: its rank, where it ran, its last heartbeat (`seen_ms`), the steps
-- it logged, how it ended, and the job context as it detected it (JSON).
CREATE TABLE run_processes (
    run_id     TEXT    NOT NULL,
    attempt    INTEGER NOT NULL,
    rank       INTEGER NOT NULL,
    local_rank INTEGER NOT NULL,
    node_rank  INTEGER NOT NULL,
    host       TEXT    NOT NULL,
    pid        INTEGER,
    status     TEXT    NOT NULL,
    start_ms   INTEGER NOT NULL,
    seen_ms    INTEGER NOT NULL,
    end_ms     INTEGER,
    first_step INTEGER,
    last_step  INTEGER,
    reason     TEXT,
    last_lines TEXT,
    context    TEXT    NOT NULL,
    PRIMARY KEY (run_id, attempt, rank)
) WITHOUT ROWID;

-- One node of an attempt, as its first process described it: GPUs, driver, and the price of
-- the node per hour with where the price came from (NULL: not priced).
CREATE TABLE run_nodes (
    run_id       TEXT    NOT NULL,
    attempt      INTEGER NOT NULL,
    node_rank    INTEGER NOT NULL,
    host         TEXT    NOT NULL,
    gpus         INTEGER NOT NULL,
    gpu_names    TEXT    NOT NULL,
    driver       TEXT,
    usd_per_hour REAL,
    price_source TEXT,
    PRIMARY KEY (run_id, attempt, node_rank)
) WITHOUT ROWID;

-- A run's job in one row, for lists and search: rewritten when a process joins or an attempt
-- ends. The live cost is computed when read.
CREATE TABLE run_jobs (
    run_id         TEXT    PRIMARY KEY,
    launcher       TEXT    NOT NULL,
    job_id         TEXT,
    world_size     INTEGER NOT NULL,
    node_count     INTEGER NOT NULL,
    attempts       INTEGER NOT NULL,
    gpus           INTEGER NOT NULL,
    lost_usd       REAL    NOT NULL,
    lost_gpu_hours REAL    NOT NULL,
    steps_replayed INTEGER NOT NULL
) WITHOUT ROWID;
