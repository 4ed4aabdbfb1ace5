//! The sweep agent: runs a sweep's trials on this machine, one per slot (a GPU, a share of a
//! GPU, or a CPU slot), with `CUDA_VISIBLE_DEVICES` set to the slot. It only launches and
//! watches processes: the server proposes parameters, prunes and enforces limits. A trial that
//! cannot start or exits non-zero is reported failed; one killed by a signal the agent did not
//! send is reported preempted, so the server starts it again with the same run.

use crate::http::Http;
use crate::{Error, Result};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where one trial runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    /// How the slot is named in reports: `gpu:0`, `gpu:0/1` (second share of GPU 0), `cpu:2`.
    pub name: String,
    /// `CUDA_VISIBLE_DEVICES` for the trial; None leaves the variable as the agent has it.
    pub cuda_visible_devices: Option<String>,
    /// GPUs the slot holds (for GPU-hours): 1 for a whole GPU, 0.5 for half of one, 0 for a CPU slot.
    pub gpus: f64,
}

/// The slots of `--gpus LIST|all` (in groups of `gpus_per_slot`, or shared by `slots_per_gpu`
/// trials each), or of `--cpu-slots N`. GPUs are indices, GPU UUIDs or MIG UUIDs,
/// comma-separated; `all` asks NVML.
pub fn slots(gpus: Option<&str>, slots_per_gpu: u32, gpus_per_slot: u32, cpu_slots: Option<u32>) -> Result<Vec<Slot>> {
    let per = slots_per_gpu.max(1);
    let group = gpus_per_slot.max(1) as usize;
    if per > 1 && group > 1 {
        return Err(Error::Invalid("--slots-per-gpu and more than one GPU per trial do not go together".into()));
    }
    match (gpus, cpu_slots) {
        (Some(_), Some(_)) => Err(Error::Invalid("give --gpus or --cpu-slots, not both".into())),
        (None, None) => Err(Error::Invalid("give --gpus LIST|all or --cpu-slots N".into())),
        (None, Some(0)) => Err(Error::Invalid("--cpu-slots must be at least 1".into())),
        (None, Some(n)) => {
            Ok((0..n).map(|i| Slot { name: format!("cpu:{i}"), cuda_visible_devices: None, gpus: 0.0 }).collect())
        }
        (Some(list), None) => {
            let devices: Vec<String> = if list.trim() == "all" {
                let count = crate::collect::gpu::device_count()
                    .map_err(|e| Error::Invalid(format!("--gpus all: cannot list GPUs ({e})")))?;
                (0..count).map(|i| i.to_string()).collect()
            } else {
                list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
            };
            if devices.len() < group {
                return Err(Error::Invalid(format!(
                    "--gpus: {} GPU(s) given (or found), fewer than the {group} one trial needs",
                    devices.len()
                )));
            }
            let mut out = Vec::new();
            // GPUs left over after the last whole group stay unused.
            for chunk in devices.chunks_exact(group) {
                let joined = chunk.join(",");
                for share in 0..per {
                    let name = if per > 1 { format!("gpu:{joined}/{share}") } else { format!("gpu:{joined}") };
                    out.push(Slot {
                        name,
                        cuda_visible_devices: Some(joined.clone()),
                        gpus: group as f64 / per as f64,
                    });
                }
            }
            Ok(out)
        }
    }
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub sweep_id: String,
    /// The server URL; else `TRAINLOG_SERVER`, else the local default.
    pub server: Option<String>,
    pub slots: Vec<Slot>,
    /// After SIGTERM to a pruned trial, how long before SIGKILL.
    pub grace: Duration,
    /// How often each running trial reports to the server (and learns whether it is pruned).
    pub heartbeat: Duration,
    /// Stop claiming trials after this many (for tests and for sharing a sweep).
    pub max_trials: Option<u64>,
    /// Submit trials to Slurm with `sbatch` instead of running them here; the slots then only
    /// bound how many trials are queued or running at once.
    pub slurm: Option<crate::slurm::SlurmOptions>,
    /// The agent's name in the sweep's trials, `HOST:ID`; None: this host's name and the
    /// agent's pid. The server records the part before the first `:` as the trials' host.
    pub name: Option<String>,
    /// When this many of the agent's first trials all fail (none finished or pruned yet), it
    /// claims no more and exits with the first failure's reason: a command that cannot work
    /// does not burn the sweep's `run_cap`. 0: never.
    pub max_initial_failures: u64,
}

impl AgentConfig {
    pub fn new(sweep_id: impl Into<String>, slots: Vec<Slot>) -> Self {
        Self {
            sweep_id: sweep_id.into(),
            server: None,
            slots,
            grace: Duration::from_secs(10),
            heartbeat: Duration::from_secs(2),
            max_trials: None,
            slurm: None,
            name: None,
            max_initial_failures: 3,
        }
    }
}

/// What an agent did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentReport {
    /// (trial index, slot name, outcome) in the order trials ended.
    pub trials: Vec<(i64, String, String)>,
    /// Why the agent stopped claiming trials.
    pub reason: String,
}

/// A trial's process: a child of the agent, or a Slurm job.
pub(crate) enum Job {
    Local { child: Child, tail: Arc<Mutex<VecDeque<String>>>, readers: Vec<std::thread::JoinHandle<()>> },
    Slurm { job_id: String, output: std::path::PathBuf, last_poll: Instant, unknown_polls: u32 },
}

struct Running {
    index: i64,
    /// The attempt this process is (the server refuses reports about superseded attempts).
    attempt: Option<i64>,
    slot: usize,
    job: Job,
    stop_sent: Option<Instant>,
    killed: bool,
    last_heartbeat: Instant,
}

/// How a trial's process ended.
#[derive(Debug, Clone, PartialEq)]
struct Ended {
    exit_code: Option<i64>,
    /// The signal that killed it, if one did.
    signal: Option<i32>,
    /// Slurm's final job state (COMPLETED, FAILED, CANCELLED, PREEMPTED, NODE_FAIL, ...).
    slurm_state: Option<String>,
    tail: String,
}

impl Job {
    fn signal(&self, signal: libc::c_int) {
        match self {
            Job::Local { child, .. } => signal_group(child, signal),
            Job::Slurm { job_id, .. } => crate::slurm::cancel(job_id, signal),
        }
    }

    /// The end of the process, once it has ended.
    fn poll(&mut self) -> Option<Ended> {
        match self {
            Job::Local { child, tail, readers } => match child.try_wait() {
                Ok(Some(status)) => {
                    // The readers end when the last holder of the pipes exits; a grandchild may
                    // keep them open, so wait a little, not forever.
                    let deadline = Instant::now() + Duration::from_secs(1);
                    while readers.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    for h in readers.drain(..).filter(|h| h.is_finished()) {
                        let _ = h.join();
                    }
                    let tail =
                        tail.lock().map(|t| t.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default();
                    Some(Ended {
                        exit_code: status.code().map(i64::from),
                        signal: status.signal(),
                        slurm_state: None,
                        tail,
                    })
                }
                Ok(None) => None,
                Err(e) => {
                    log(&format!("cannot watch pid {}: {e}", child.id()));
                    None
                }
            },
            Job::Slurm { job_id, output, last_poll, unknown_polls } => {
                if last_poll.elapsed() < Duration::from_millis(500) {
                    return None;
                }
                *last_poll = Instant::now();
                let state = match crate::slurm::job_state(job_id) {
                    Some(state) => {
                        *unknown_polls = 0;
                        state
                    }
                    // Slurm forgets finished jobs after MinJobAge: ask its accounting, and after
                    // a minute of silence take the job as lost (the sweep starts it again).
                    None => {
                        *unknown_polls += 1;
                        match crate::slurm::accounted_state(job_id) {
                            Some(state) => state,
                            None if *unknown_polls >= 120 => {
                                crate::slurm::JobState { state: "LOST".into(), exit_code: None, signal: None }
                            }
                            None => return None,
                        }
                    }
                };
                if !state.is_final() {
                    return None;
                }
                let text = std::fs::read_to_string(&*output).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
                Some(Ended { exit_code: state.exit_code, signal: state.signal, slurm_state: Some(state.state), tail })
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Job::Local { child, .. } => format!("pid {}", child.id()),
            Job::Slurm { job_id, .. } => format!("Slurm job {job_id}"),
        }
    }
}

const TAIL_LINES: usize = 40;
/// Of a longer line, only the start is kept.
const TAIL_LINE_BYTES: usize = 2000;
static TERMINATE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_terminate(_: libc::c_int) {
    TERMINATE.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    let handler = on_terminate as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
    }
}

/// Sends `signal` to the trial's process group (the trial and what it started).
fn signal_group(child: &Child, signal: libc::c_int) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is touched.
    unsafe {
        libc::kill(-(child.id() as libc::pid_t), signal);
    }
}

fn log(line: &str) {
    eprintln!("trainlog agent: {line}");
}

/// Runs trials of the sweep until it is finished (or stopped) and this agent's trials ended.
/// A server outage is waited out: the agent keeps its trials running and retries.
pub fn run_agent(config: &AgentConfig) -> Result<AgentReport> {
    if config.slots.is_empty() {
        return Err(Error::Invalid("the agent has no slot to run trials in".into()));
    }
    install_signal_handlers();
    let url = crate::server_url(config.server.as_deref());
    let http = Http::new(&url, Duration::from_secs(30))?;
    let sweep = crate::api::encode(&config.sweep_id);
    let agent_name = match config.name.as_deref().map(str::trim) {
        Some("") => return Err(Error::Invalid("the agent's name is empty".into())),
        Some(name) => name.to_owned(),
        None => format!("{}:{}", crate::run::hostname(), std::process::id()),
    };
    let mut running: Vec<Running> = Vec::new();
    let mut report = AgentReport::default();
    let mut claimed = 0u64;
    let mut done: Option<String> = None;
    let mut refused: Option<Error> = None;
    let mut terminating: Option<Instant> = None;
    let mut next_claim = Instant::now();
    let mut first_failure: Option<String> = None;
    loop {
        if TERMINATE.load(Ordering::SeqCst) && terminating.is_none() {
            terminating = Some(Instant::now());
            done.get_or_insert_with(|| "the agent was asked to stop".into());
            log("stopping: passing SIGTERM to running trials");
            for r in &running {
                r.job.signal(libc::SIGTERM);
            }
        }
        // Watch running trials first, so their heartbeats go out before anything else.
        let mut i = 0;
        while i < running.len() {
            let r = &mut running[i];
            if let Some(ended) = r.job.poll() {
                let r = running.swap_remove(i);
                let outcome = classify(&ended, r.stop_sent.is_some(), terminating.is_some());
                let slot = config.slots[r.slot].name.clone();
                log(&format!("trial {} on {slot} ended: {outcome} ({})", r.index, describe(&ended)));
                if outcome == "failed" && first_failure.is_none() {
                    first_failure =
                        Some(format!("trial {} ended with {}", r.index, describe(&ended)) + &last_lines(&ended.tail));
                }
                end(&http, &sweep, r.index, r.attempt, outcome, ended.exit_code, &ended.tail);
                report.trials.push((r.index, slot, outcome.to_owned()));
                continue;
            }
            if r.stop_sent.is_none() && r.last_heartbeat.elapsed() >= config.heartbeat {
                r.last_heartbeat = Instant::now();
                let path = format!("/sweeps/{sweep}/trials/{}/heartbeat", r.index);
                if let Ok(hb) = http.post(&path, &json!({"attempt": r.attempt})) {
                    if hb["stop"] == true {
                        log(&format!("trial {} stopped: {}", r.index, hb["reason"].as_str().unwrap_or("")));
                        r.job.signal(libc::SIGTERM);
                        r.stop_sent = Some(Instant::now());
                    }
                }
            }
            let grace_from = r.stop_sent.or(terminating);
            if grace_from.is_some_and(|at| at.elapsed() >= config.grace) && !r.killed {
                r.job.signal(libc::SIGKILL);
                r.killed = true;
            }
            i += 1;
        }
        // Fill free slots.
        while done.is_none() && Instant::now() >= next_claim {
            if let Some(why) = failing_from_the_start(&report, config.max_initial_failures, first_failure.as_deref()) {
                if !running.is_empty() {
                    log("the first trials all failed: claiming no more, waiting for the running ones to end");
                }
                done = Some(why.clone());
                refused = Some(Error::Invalid(why));
                break;
            }
            let Some(slot) = (0..config.slots.len()).find(|s| !running.iter().any(|r| r.slot == *s)) else { break };
            if config.max_trials.is_some_and(|m| claimed >= m) {
                done = Some("reached --max-trials".into());
                break;
            }
            let s = &config.slots[slot];
            let answer = http
                .post(&format!("/sweeps/{sweep}/next"), &json!({"agent": agent_name, "slot": s.name, "gpus": s.gpus}));
            match answer {
                Ok(a) if a["status"] == "trial" => {
                    claimed += 1;
                    let index = a["index"].as_i64().unwrap_or(-1);
                    let attempt = a["attempt"].as_i64();
                    let started = match &config.slurm {
                        Some(slurm) => crate::slurm::submit(&a, &config.sweep_id, slurm, &url),
                        None => launch(&a, s, &url),
                    };
                    match started {
                        Ok(job) => {
                            log(&format!(
                                "trial {index} (attempt {}) on {} as {}: {}",
                                a["attempt"],
                                s.name,
                                job.describe(),
                                a["params"]
                            ));
                            running.push(Running {
                                index,
                                attempt,
                                slot,
                                job,
                                stop_sent: None,
                                killed: false,
                                last_heartbeat: Instant::now(),
                            })
                        }
                        Err(why) => {
                            log(&format!("trial {index} could not start: {why}"));
                            first_failure.get_or_insert_with(|| format!("trial {index} could not start: {why}"));
                            end(&http, &sweep, index, attempt, "failed", None, &why);
                            report.trials.push((index, s.name.clone(), "failed".into()));
                        }
                    }
                }
                // Nothing to start now, but trials still run elsewhere: one may come back preempted.
                Ok(a) if a["status"] == "wait" => {
                    next_claim = Instant::now() + Duration::from_millis(a["retry_after_ms"].as_u64().unwrap_or(1000));
                    break;
                }
                Ok(a) => done = Some(a["reason"].as_str().unwrap_or("done").to_owned()),
                Err(Error::Unreachable { reason, .. }) => {
                    log(&format!("server unreachable, retrying: {reason}"));
                    next_claim = Instant::now() + Duration::from_secs(2);
                }
                // The server refuses to start trials (an unknown sweep, say): claim no more, and let
                // the trials already running finish before exiting with the error.
                Err(e) => {
                    log(&format!("the server refused a new trial: {e}"));
                    done = Some(e.to_string());
                    refused = Some(e);
                }
            }
        }
        if done.is_some() && running.is_empty() {
            if let Some(e) = refused {
                return Err(e);
            }
            report.reason = done.unwrap_or_default();
            return Ok(report);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Why the agent stops claiming trials, when its first `limit` trials all failed.
fn failing_from_the_start(report: &AgentReport, limit: u64, first: Option<&str>) -> Option<String> {
    let failed = report.trials.iter().filter(|t| t.2 == "failed").count() as u64;
    let worked = report.trials.iter().any(|t| t.2 == "finished" || t.2 == "pruned");
    (limit > 0 && failed >= limit && !worked).then(|| {
        format!(
            "the first {failed} trials all failed, so no more are started (--max-initial-failures {limit}); the first: {}",
            first.unwrap_or("no reason recorded")
        )
    })
}

/// A trial's last lines, indented under the line that names it.
fn last_lines(tail: &str) -> String {
    let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
    let lines = &lines[lines.len().saturating_sub(10)..];
    if lines.is_empty() {
        return String::new();
    }
    format!("; its last lines:\n    {}", lines.join("\n    "))
}

/// How a trial ended, as the server records it: pruned when the agent stopped it; preempted when
/// a signal the agent did not send killed it, or Slurm preempted, requeued or lost its node.
fn classify(ended: &Ended, pruned: bool, agent_stopping: bool) -> &'static str {
    if pruned {
        return "pruned";
    }
    if let Some(state) = ended.slurm_state.as_deref() {
        return match state {
            "COMPLETED" => "finished",
            "PREEMPTED" | "NODE_FAIL" | "BOOT_FAIL" | "CANCELLED" | "REQUEUED" | "TIMEOUT" | "DEADLINE" | "LOST" => {
                "preempted"
            }
            _ if agent_stopping || ended.signal.is_some_and(|s| s != 0) => "preempted",
            _ => "failed",
        };
    }
    if ended.exit_code == Some(0) {
        "finished"
    } else if agent_stopping
        || matches!(ended.signal, Some(libc::SIGTERM | libc::SIGKILL | libc::SIGINT | libc::SIGHUP))
        || matches!(ended.exit_code, Some(143 | 137))
    {
        "preempted"
    } else {
        "failed"
    }
}

fn describe(ended: &Ended) -> String {
    let how = match (ended.exit_code, ended.signal) {
        (_, Some(s)) if s != 0 => format!("signal {s}"),
        (Some(c), _) => format!("exit code {c}"),
        _ => "unknown status".into(),
    };
    match &ended.slurm_state {
        Some(state) => format!("{state}, {how}"),
        None => how,
    }
}

/// Reports the end of a trial; the secrets in the output's tail (credentials in URLs, tokens,
/// secret assignments) are masked first.
fn end(http: &Http, sweep: &str, index: i64, attempt: Option<i64>, outcome: &str, exit_code: Option<i64>, tail: &str) {
    let (tail, _) = crate::collect::redact::redact_text(tail);
    let body = json!({"outcome": outcome, "attempt": attempt, "exit_code": exit_code, "output_tail": tail});
    for attempt in 0..30 {
        match http.post(&format!("/sweeps/{sweep}/trials/{index}/end"), &body) {
            Ok(_) => return,
            Err(Error::Unreachable { .. }) if attempt < 29 => std::thread::sleep(Duration::from_secs(2)),
            Err(e) => {
                log(&format!("could not report the end of trial {index}: {e}"));
                return;
            }
        }
    }
}

/// Echoes a trial's output line by line and keeps its last lines. It reads bytes, not text, so
/// output that is not UTF-8 never stops the reading (the trial would die on a broken pipe); a
/// line redrawn with `\r` (a progress bar) keeps only its last drawing, and is not echoed.
fn forward_output(mut stream: Box<dyn std::io::Read + Send>, index: i64, tail: &Mutex<VecDeque<String>>) {
    let emit = |line: &[u8]| {
        let line = String::from_utf8_lossy(line);
        let _ = writeln!(std::io::stdout().lock(), "[trial {index}] {line}");
        if let Ok(mut t) = tail.lock() {
            if t.len() == TAIL_LINES {
                t.pop_front();
            }
            t.push_back(line.into_owned());
        }
    };
    let mut chunk = [0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let mut carriage_return = false;
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                emit(&line);
                line.clear();
                carriage_return = false;
                continue;
            }
            if carriage_return {
                line.clear();
                carriage_return = false;
            }
            if b == b'\r' {
                carriage_return = true;
            } else if line.len() < TAIL_LINE_BYTES {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        emit(&line);
    }
}

/// The variables a trial gets: where to log, its run, its sweep and its params.
pub(crate) fn trial_env(a: &Value, server: &str) -> Vec<(&'static str, String)> {
    vec![
        ("TRAINLOG_SERVER", server.to_owned()),
        ("TRAINLOG_PROJECT", a["project"].as_str().unwrap_or_default().to_owned()),
        ("TRAINLOG_RUN_ID", a["run_id"].as_str().unwrap_or_default().to_owned()),
        ("TRAINLOG_RESUME", "allow".to_owned()),
        ("TRAINLOG_SWEEP_ID", a["sweep_id"].as_str().unwrap_or_default().to_owned()),
        ("TRAINLOG_SWEEP_TRIAL", a["index"].to_string()),
        ("TRAINLOG_SWEEP_PARAMS", a["params"].to_string()),
        ("TRAINLOG_SWEEP_ATTEMPT", a["attempt"].to_string()),
    ]
}

/// The trial's command line: the sweep's command, then `--key=value` for each param.
pub(crate) fn trial_command(a: &Value) -> std::result::Result<Vec<String>, String> {
    let mut command: Vec<String> =
        a["command"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect();
    if command.is_empty() {
        return Err("the sweep has an empty command".into());
    }
    command.extend(param_args(&a["params"]));
    Ok(command)
}

/// `--key=value` for each param; strings as they are, everything else as JSON.
pub fn param_args(params: &Value) -> Vec<String> {
    params
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| match v {
                    Value::String(s) => format!("--{k}={s}"),
                    other => format!("--{k}={other}"),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn launch(a: &Value, slot: &Slot, server: &str) -> std::result::Result<Job, String> {
    let index = a["index"].as_i64().ok_or("the server sent a trial without an index")?;
    let command = trial_command(a)?;
    let (program, args) = command.split_first().ok_or("the sweep has an empty command")?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(trial_env(a, server))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(devices) = &slot.cuda_visible_devices {
        cmd.env("CUDA_VISIBLE_DEVICES", devices);
    }
    // If the agent dies, its trial gets SIGTERM (a preemption notice) instead of running on
    // unwatched while the sweep gives the trial to another agent.
    // SAFETY: prctl only sets a flag of the child between fork and exec; it touches no memory.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("cannot start {program:?}: {e}"))?;
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
    let mut readers = Vec::new();
    let streams: Vec<Box<dyn std::io::Read + Send>> = [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    .collect();
    for stream in streams {
        let tail = tail.clone();
        readers.push(std::thread::spawn(move || forward_output(stream, index, &tail)));
    }
    Ok(Job::Local { child, tail, readers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::ExitStatus;

    #[test]
    fn slots_follow_the_gpu_list_and_shares() {
        let s = slots(Some("0,1"), 2, 1, None).unwrap();
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["gpu:0/0", "gpu:0/1", "gpu:1/0", "gpu:1/1"]);
        assert_eq!((s[3].cuda_visible_devices.as_deref(), s[3].gpus), (Some("1"), 0.5));
        let uuid = "MIG-4b2b8c3e-93a5-5a8b-9f0c-1b3d4e5f6a7b";
        assert_eq!(slots(Some(uuid), 1, 1, None).unwrap()[0].cuda_visible_devices.as_deref(), Some(uuid));
        let pairs = slots(Some("0,1,2,3,4"), 1, 2, None).unwrap();
        let pairs: Vec<(&str, f64)> =
            pairs.iter().map(|s| (s.cuda_visible_devices.as_deref().unwrap(), s.gpus)).collect();
        assert_eq!(pairs, [("0,1", 2.0), ("2,3", 2.0)]);
        let cpu = slots(None, 1, 1, Some(3)).unwrap();
        assert_eq!((cpu.len(), cpu[2].gpus, cpu[2].cuda_visible_devices.clone()), (3, 0.0, None));
        assert!(slots(Some("0"), 1, 1, Some(1)).is_err());
        assert!(slots(None, 1, 1, None).is_err());
        assert!(slots(Some("0"), 1, 2, None).is_err());
        assert!(slots(Some("0,1"), 2, 2, None).is_err());
    }

    #[test]
    fn output_is_read_as_bytes_and_progress_bars_keep_their_last_drawing() {
        let tail = Mutex::new(VecDeque::new());
        let text: &[u8] = b"epoch 1\r\nbad \xff byte\n10%\r50%\r100%\nlast";
        forward_output(Box::new(text), 0, &tail);
        let lines: Vec<String> = tail.into_inner().unwrap().into_iter().collect();
        assert_eq!(lines, ["epoch 1", "bad \u{fffd} byte", "100%", "last"]);
    }

    #[test]
    fn params_become_key_value_arguments() {
        let args = param_args(&json!({"lr": 0.001, "optimizer": "adam", "layers": 4, "flag": true}));
        assert_eq!(args, ["--flag=true", "--layers=4", "--lr=0.001", "--optimizer=adam"]);
    }

    fn local(raw: i32) -> Ended {
        let status = ExitStatus::from_raw(raw);
        Ended {
            exit_code: status.code().map(i64::from),
            signal: status.signal(),
            slurm_state: None,
            tail: String::new(),
        }
    }

    fn slurm(state: &str, exit_code: i64, signal: i32) -> Ended {
        Ended { exit_code: Some(exit_code), signal: Some(signal), slurm_state: Some(state.into()), tail: String::new() }
    }

    #[test]
    fn exits_are_classified() {
        assert_eq!(classify(&local(0), false, false), "finished");
        assert_eq!(classify(&local(1 << 8), false, false), "failed");
        assert_eq!(classify(&local(libc::SIGTERM), false, false), "preempted");
        assert_eq!(classify(&local(libc::SIGTERM), true, false), "pruned");
        assert_eq!(classify(&local(1 << 8), false, true), "preempted");
        assert_eq!(classify(&slurm("COMPLETED", 0, 0), false, false), "finished");
        assert_eq!(classify(&slurm("FAILED", 3, 0), false, false), "failed");
        assert_eq!(classify(&slurm("FAILED", 0, 15), false, false), "preempted");
        assert_eq!(classify(&slurm("PREEMPTED", 0, 0), false, false), "preempted");
        assert_eq!(classify(&slurm("CANCELLED", 0, 15), true, false), "pruned");
    }
}
