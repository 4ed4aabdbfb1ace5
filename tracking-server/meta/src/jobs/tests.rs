//! The join rules and the ends of attempts, on the test database.

use super::*;
use crate::NewRun;
use trainlog_schema::ProjectName;

fn process(rank: i64, world: i64, per_node: i64, restart: &str) -> ProcessJoin {
    let node_rank = rank / per_node;
    ProcessJoin {
        rank,
        local_rank: rank % per_node,
        world_size: world,
        node_rank,
        node_count: world / per_node,
        host: format!("node-{node_rank}"),
        launcher: "torchrun".into(),
        job_id: Some("job-1".into()),
        restart: Some(restart.into()),
        context: "{}".into(),
        node: (rank % per_node == 0).then(|| NodeInfo {
            gpus: per_node,
            usd_per_hour: Some(2.0 * per_node as f64),
            ..NodeInfo::default()
        }),
        ..ProcessJoin::default()
    }
}

fn join(m: &MetaStore, run: &RunId, p: ProcessJoin) -> Joined {
    let new = NewRun {
        id: Some(run.clone()),
        project: Some(ProjectName::parse("project", "jobs").expect("name")),
        resume: true,
        process: Some(p),
        ..NewRun::default()
    };
    m.create_run_joining(&new).expect("join").2.expect("joined")
}

fn end(m: &MetaStore, run: &RunId, attempt: i64, rank: i64, status: RunStatus) -> bool {
    let report = ProcessReport { attempt, rank, ..ProcessReport::default() };
    m.end_process(run, &report, status, None).expect("end")
}

#[test]
fn ranks_in_any_order_join_one_attempt_and_the_run_ends_when_every_rank_did() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-ranks").expect("id");
    for rank in [5, 0, 7, 3, 1, 2, 6, 4] {
        assert_eq!(join(&m, &run, process(rank, 8, 4, "0")).attempt, 1);
    }
    let (job, attempts) = m.job(&run).expect("job").expect("a job");
    assert_eq!((job.attempts, job.world_size, job.node_count, job.gpus), (1, 8, 2, 8));
    assert_eq!(attempts[0].ranks, 8);
    assert_eq!(job.usd_per_hour, 16.0);
    for rank in 0..7 {
        assert!(!end(&m, &run, 1, rank, RunStatus::Finished), "rank {rank} is not the last");
        assert_eq!(m.run(&run).expect("run").status, RunStatus::Running);
    }
    assert!(end(&m, &run, 1, 7, RunStatus::Finished));
    assert_eq!(m.run(&run).expect("run").status, RunStatus::Finished);
    let (job, attempts) = m.job(&run).expect("job").expect("a job");
    assert_eq!(attempts[0].status, "finished");
    assert_eq!(job.usd_per_hour, 0.0);
}

#[test]
fn a_failed_rank_fails_the_attempt_even_when_the_others_were_told_to_stop() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-failed").expect("id");
    for rank in 0..4 {
        join(&m, &run, process(rank, 4, 4, "0"));
    }
    let report =
        ProcessReport { attempt: 1, rank: 2, reason: Some("CUDA out of memory".into()), ..ProcessReport::default() };
    m.end_process(&run, &report, RunStatus::Failed, None).expect("end");
    for rank in [0, 1, 3] {
        end(&m, &run, 1, rank, RunStatus::Preempted);
    }
    assert_eq!(m.run(&run).expect("run").status, RunStatus::Failed);
    let (_, attempts) = m.job(&run).expect("job").expect("a job");
    assert_eq!(attempts[0].reason.as_deref(), Some("rank 2 failed: CUDA out of memory"));
}

#[test]
fn a_restart_or_a_rank_starting_again_is_a_new_attempt_and_the_old_one_is_kept() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-restarts").expect("id");
    for rank in 0..2 {
        join(&m, &run, process(rank, 2, 1, "0"));
    }
    // The launcher says it restarted the job: a new attempt; the first ends lost.
    let second = join(&m, &run, process(1, 2, 1, "1"));
    assert_eq!(second, Joined { attempt: 2, new_attempt: true });
    assert_eq!(join(&m, &run, process(0, 2, 1, "1")).attempt, 2);
    // The same restart count, but rank 0 starts again (a resubmitted job): a third attempt.
    assert_eq!(join(&m, &run, process(0, 2, 1, "1")).attempt, 3);
    let (job, attempts) = m.job(&run).expect("job").expect("a job");
    assert_eq!(job.attempts, 3);
    let statuses: Vec<&str> = attempts.iter().map(|a| a.status.as_str()).collect();
    // The first was preempted: its launcher started the job again.
    assert_eq!(statuses, ["preempted", "lost", "running"]);
    assert!(attempts[0].ended_by.as_deref().is_some_and(|e| e.contains("restart=0 -> restart=1")), "{attempts:?}");
    assert!(attempts[0].end_ms.is_some() && attempts[1].end_ms.is_some());
    // A process of a superseded attempt ending does not end the run.
    assert!(!end(&m, &run, 2, 1, RunStatus::Finished));
    assert_eq!(m.run(&run).expect("run").status, RunStatus::Running);
}

#[test]
fn a_preempted_attempt_keeps_its_status_when_the_next_starts() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-preempted").expect("id");
    join(&m, &run, process(0, 1, 1, ""));
    assert!(end(&m, &run, 1, 0, RunStatus::Preempted));
    assert_eq!(m.run(&run).expect("run").status, RunStatus::Preempted);
    assert_eq!(join(&m, &run, process(0, 1, 1, "")).attempt, 2);
    assert_eq!(m.run(&run).expect("run").status, RunStatus::Running);
    let (_, attempts) = m.job(&run).expect("job").expect("a job");
    assert_eq!(attempts[0].status, "preempted");
}

#[test]
fn a_join_out_of_range_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-bad").expect("id");
    let new = NewRun {
        id: Some(run.clone()),
        project: Some(ProjectName::parse("project", "jobs").expect("name")),
        resume: true,
        process: Some(ProcessJoin { rank: 4, ..process(0, 4, 4, "") }),
        ..NewRun::default()
    };
    match m.create_run(&new) {
        Err(Error::Invalid { field, .. }) => assert_eq!(field, "process.rank"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(m.run(&run).is_err(), "nothing is half-written");
}

#[test]
fn the_attempt_names_the_first_rank_to_fail_not_the_lowest() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-first-failure").expect("id");
    for rank in 0..4 {
        join(&m, &run, process(rank, 4, 4, "0"));
    }
    let failed = |rank: i64, reason: &str, end_ms: i64| {
        let report = ProcessReport {
            attempt: 1,
            rank,
            reason: Some(reason.into()),
            last_lines: Some(format!("lines of rank {rank}")),
            ..ProcessReport::default()
        };
        m.end_process(&run, &report, RunStatus::Failed, Some(end_ms)).expect("end");
    };
    let now = now_ms();
    // Rank 3 dies first; the collectives of ranks 1 and 0 fail after it, as DDP's do.
    failed(1, "RuntimeError: Connection closed by peer", now + 20);
    failed(3, "CUDA out of memory", now);
    failed(0, "RuntimeError: Connection closed by peer", now + 30);
    end(&m, &run, 1, 2, RunStatus::Preempted);
    let (_, attempts) = m.job(&run).expect("job").expect("a job");
    assert_eq!(attempts[0].status, "failed");
    assert_eq!(attempts[0].reason.as_deref(), Some("rank 3 failed: CUDA out of memory"));
    assert_eq!(attempts[0].last_lines.as_deref(), Some("lines of rank 3"));
}

/// A heartbeat from `rank` of `attempt` taken `ago_ms` before now.
fn beat(m: &MetaStore, run: &RunId, attempt: i64, rank: i64, ago_ms: i64) -> Beat {
    let report = ProcessReport { attempt, rank, at_ms: Some(now_ms() - ago_ms), ..ProcessReport::default() };
    m.process_heartbeat(run, &report, false).expect("heartbeat").0
}

/// `process` that started `ago_ms` before now.
fn started(p: ProcessJoin, ago_ms: i64) -> ProcessJoin {
    ProcessJoin { started_ms: Some(now_ms() - ago_ms), ..p }
}

#[test]
fn a_job_whose_processes_all_fell_silent_ends_lost_at_their_last_heartbeat() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-silent").expect("id");
    let alive = RunId::parse("id", "job-alive").expect("id");
    let bound = lost_after_ms();
    for rank in 0..2 {
        join(&m, &run, started(process(rank, 2, 2, "0"), 3 * bound));
        join(&m, &alive, started(process(rank, 2, 2, "0"), 3 * bound));
    }
    beat(&m, &run, 1, 0, 2 * bound);
    beat(&m, &run, 1, 1, bound + 1_000);
    beat(&m, &alive, 1, 0, 2 * bound);
    beat(&m, &alive, 1, 1, bound - 10_000);
    assert_eq!(m.close_silent_attempts().expect("check"), std::slice::from_ref(&run));
    assert_eq!(m.close_silent_attempts().expect("again"), Vec::<RunId>::new(), "once");
    let ended = m.run(&run).expect("run");
    assert_eq!(ended.status, RunStatus::Lost);
    let (job, attempts) = m.job(&run).expect("job").expect("a job");
    let a = &attempts[0];
    assert_eq!(a.status, "lost");
    assert_eq!(ended.end_ms, a.end_ms);
    assert!(a.ended_by.as_deref().is_some_and(|e| e.contains("no heartbeat")), "{a:?}");
    assert!(a.processes.iter().all(|p| p.status == "lost" && p.end_ms == Some(p.seen_ms)));
    // Its one node ran from the start to the last heartbeat; no checkpoint: all of it is lost.
    let hours = (a.end_ms.expect("end") - a.start_ms) as f64 / 3.6e6;
    assert!((a.lost_usd - 4.0 * hours).abs() < 1e-9, "{} vs {}", a.lost_usd, 4.0 * hours);
    assert_eq!(job.usd_per_hour, 0.0, "nothing runs");
    assert_eq!(m.run(&alive).expect("run").status, RunStatus::Running, "a process spoke within the bound");
}

#[test]
fn an_archived_run_whose_processes_fell_silent_ends_lost_too() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-archived").expect("id");
    let bound = lost_after_ms();
    join(&m, &run, started(process(0, 1, 1, "0"), 3 * bound));
    beat(&m, &run, 1, 0, 2 * bound);
    m.set_run_deleted(&run, true).expect("archive");
    assert_eq!(m.close_silent_attempts().expect("check"), std::slice::from_ref(&run));
    let (status, end_ms): (String, Option<i64>) = m
        .read(|db| {
            let r = db.row("SELECT status, end_ms FROM runs WHERE id = ?1", vals![run.as_str()])?.expect("row");
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("read");
    assert_eq!(status, "lost", "archived, and still no run stays running without a live process");
    assert!(end_ms.is_some_and(|end| end <= now_ms() - 2 * bound), "ends at its last heartbeat: {end_ms:?}");
}

#[test]
fn a_rank_that_failed_before_the_others_fell_silent_fails_the_run() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-oom").expect("id");
    let bound = lost_after_ms();
    for rank in 0..2 {
        join(&m, &run, started(process(rank, 2, 2, "0"), 3 * bound));
    }
    let report = ProcessReport {
        attempt: 1,
        rank: 1,
        reason: Some("killed by SIGKILL (the OOM killer)".into()),
        ..ProcessReport::default()
    };
    m.end_process(&run, &report, RunStatus::Failed, Some(now_ms() - 2 * bound)).expect("end");
    beat(&m, &run, 1, 0, 2 * bound);
    assert_eq!(m.close_silent_attempts().expect("check"), std::slice::from_ref(&run));
    assert_eq!(m.run(&run).expect("run").status, RunStatus::Failed);
    let (_, attempts) = m.job(&run).expect("job").expect("a job");
    assert!(attempts[0].ended_by.as_deref().is_some_and(|e| e.starts_with("rank 1 failed: killed by SIGKILL")));
}

#[test]
fn a_process_of_a_lost_attempt_that_speaks_again_goes_on_in_a_new_attempt() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-partitioned").expect("id");
    let bound = lost_after_ms();
    for rank in 0..2 {
        join(&m, &run, started(process(rank, 2, 2, "0"), 3 * bound));
    }
    for rank in 0..2 {
        beat(&m, &run, 1, rank, 2 * bound);
    }
    m.close_silent_attempts().expect("check");
    assert_eq!(m.run(&run).expect("run").status, RunStatus::Lost);
    // The network comes back: rank 1 speaks first and opens attempt 2; rank 0 joins it.
    assert_eq!(beat(&m, &run, 1, 1, 0), Beat { yours: 2, latest: 2 });
    assert_eq!(m.run(&run).expect("run").status, RunStatus::Running);
    assert_eq!(beat(&m, &run, 1, 0, 0), Beat { yours: 2, latest: 2 });
    let (job, attempts) = m.job(&run).expect("job").expect("a job");
    assert_eq!(attempts.iter().map(|a| a.status.as_str()).collect::<Vec<_>>(), ["lost", "running"]);
    assert_eq!(attempts[1].ranks, 2);
    assert_eq!(job.usd_per_hour, 4.0, "its node, priced as before");
    for rank in 0..2 {
        end(&m, &run, 1, rank, RunStatus::Finished);
    }
    assert_eq!(m.run(&run).expect("run").status, RunStatus::Finished);
    let (_, attempts) = m.job(&run).expect("job").expect("a job");
    assert_eq!(attempts[1].status, "finished");
}

#[test]
fn sigterm_without_evidence_is_killed_until_the_launcher_starts_the_job_again() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let cancelled = RunId::parse("id", "job-cancelled").expect("id");
    let requeued = RunId::parse("id", "job-requeued").expect("id");
    for run in [&cancelled, &requeued] {
        join(&m, run, process(0, 1, 1, "0"));
        let report = ProcessReport {
            attempt: 1,
            rank: 0,
            reason: Some("SIGTERM; nothing says it was a preemption".into()),
            ..ProcessReport::default()
        };
        assert!(m.end_process(run, &report, RunStatus::Killed, None).expect("end"));
        assert_eq!(m.run(run).expect("run").status, RunStatus::Killed);
    }
    // Slurm requeues one (its restart count moves on): that end was a preemption.
    join(&m, &requeued, process(0, 1, 1, "1"));
    let (_, attempts) = m.job(&requeued).expect("job").expect("a job");
    assert_eq!(attempts[0].status, "preempted");
    assert!(attempts[0].ended_by.as_deref().is_some_and(|e| e.contains("after it ended killed")), "{attempts:?}");
    let (_, attempts) = m.job(&cancelled).expect("job").expect("a job");
    assert_eq!(attempts[0].status, "killed");
    assert_eq!(attempts[0].ended_by.as_deref(), Some("rank 0 killed: SIGTERM; nothing says it was a preemption"));
}

#[test]
fn the_work_an_attempt_lost_stays_what_it_was_when_retention_deletes_its_checkpoint() {
    let dir = tempfile::tempdir().expect("dir");
    let m = crate::test_store(dir.path());
    let run = RunId::parse("id", "job-retained").expect("id");
    join(&m, &run, started(process(0, 1, 1, ""), 3_600_000));
    // Checkpoints at steps 1000 and 3000; the attempt reached step 3400 and was preempted.
    for (name, step, ago) in [("c1000", 1000, 2_400_000), ("c3000", 3000, 600_000)] {
        m.write(|tx| {
            tx.exec(
                "INSERT INTO checkpoints (run_id, name, step, files, metadata, created_ms) VALUES (?1, ?2, ?3, '[]', '{}', ?4)",
                vals![run.as_str(), name, step, now_ms() - ago],
            )
        })
        .expect("checkpoint");
    }
    let report =
        ProcessReport { attempt: 1, rank: 0, first_step: Some(0), last_step: Some(3400), ..ProcessReport::default() };
    m.end_process(&run, &report, RunStatus::Preempted, None).expect("end");
    let lost = |m: &MetaStore| {
        let (job, attempts) = m.job(&run).expect("job").expect("a job");
        (attempts[0].last_checkpoint_step, attempts[0].lost_steps, job.lost_gpu_hours)
    };
    let before = lost(&m);
    assert_eq!((before.0, before.1), (Some(3000), 400), "the work after its last checkpoint");
    // Checkpoint retention deletes both (it keeps a later attempt's).
    m.write(|tx| tx.exec("DELETE FROM checkpoints WHERE run_id = ?1", vals![run.as_str()])).expect("retention");
    assert_eq!(lost(&m), before, "what it lost was fixed when it ended");
}
