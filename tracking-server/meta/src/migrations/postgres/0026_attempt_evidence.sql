-- PostgreSQL version of ../0026_attempt_evidence.sql (the same statements).
--
-- What decided how an attempt ended, in words: the process whose end decided it and why (an exit
-- code, a signal and whether anything says it was a preemption), no heartbeat from any process
-- for the server's bound, or its launcher starting the job again. The server's liveness check
-- reads the running attempts only, through a partial index.
ALTER TABLE run_attempts ADD COLUMN ended_by TEXT;
-- Where a node's GPU count came from (the launcher's allocation on the node, what NVML showed),
-- saying so when they disagree.
ALTER TABLE run_nodes ADD COLUMN gpus_source TEXT;
CREATE INDEX run_attempts_running ON run_attempts (run_id, number) WHERE status = 'running';
