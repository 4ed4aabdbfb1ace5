//! Sweep trials as Slurm jobs: `sbatch` a script per trial (with `--gres=gpu:N`, so Slurm sets
//! `CUDA_VISIBLE_DEVICES`), `scontrol show job` to learn how it ended, `scancel` to stop it.

use serde_json::Value;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How the agent submits trials.
#[derive(Debug, Clone, Default)]
pub struct SlurmOptions {
    pub partition: Option<String>,
    pub gpus_per_trial: u32,
    /// Where job scripts and their output go; must be reachable from the compute nodes.
    pub dir: PathBuf,
    /// More `sbatch` options, passed as they are (`--time=2:00:00`, `--mem=32G`, …).
    pub extra_args: Vec<String>,
}

/// A job's state as `scontrol` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobState {
    pub state: String,
    pub exit_code: Option<i64>,
    pub signal: Option<i32>,
}

impl JobState {
    /// Whether the job is over (not pending, running, suspended, completing or requeued).
    pub fn is_final(&self) -> bool {
        !matches!(
            self.state.as_str(),
            "PENDING"
                | "RUNNING"
                | "CONFIGURING"
                | "COMPLETING"
                | "SUSPENDED"
                | "REQUEUED"
                | "REQUEUE_HOLD"
                | "REQUEUE_FED"
                | "RESIZING"
                | "SIGNALING"
                | "STAGE_OUT"
                | "STOPPED"
        )
    }
}

/// Quotes a word for a POSIX shell.
fn shell_quote(word: &str) -> String {
    if !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b)) {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The batch script of a trial: its environment, then its command.
pub fn batch_script(a: &Value, server: &str) -> Result<String, String> {
    let command = crate::agent::trial_command(a)?;
    let mut script = String::from("#!/bin/sh\n# A trainlog sweep trial, submitted by `trainlog agent --slurm`.\n");
    for (key, value) in crate::agent::trial_env(a, server) {
        script.push_str(&format!("export {key}={}\n", shell_quote(&value)));
    }
    script.push_str("exec");
    for word in &command {
        script.push(' ');
        script.push_str(&shell_quote(word));
    }
    script.push('\n');
    Ok(script)
}

/// Submits a trial of `sweep_id`; answers the job to watch. File names come from the agent's
/// own sweep id and the trial's numbers, never from free text the server sent.
pub(crate) fn submit(
    a: &Value,
    sweep_id: &str,
    options: &SlurmOptions,
    server: &str,
) -> Result<crate::agent::Job, String> {
    let sweep: String = sweep_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    let (index, attempt) = (a["index"].as_i64().unwrap_or(-1), a["attempt"].as_i64().unwrap_or(0));
    let name = format!("trainlog-{sweep}-{index}-{attempt}");
    std::fs::create_dir_all(&options.dir).map_err(|e| format!("cannot create {}: {e}", options.dir.display()))?;
    let script_path = options.dir.join(format!("{name}.sh"));
    let output = options.dir.join(format!("{name}.out"));
    std::fs::write(&script_path, batch_script(a, server)?)
        .map_err(|e| format!("cannot write {}: {e}", script_path.display()))?;
    let mut cmd = Command::new("sbatch");
    cmd.arg("--parsable").arg(format!("--job-name={name}")).arg(format!("--output={}", output.display()));
    if options.gpus_per_trial > 0 {
        cmd.arg(format!("--gres=gpu:{}", options.gpus_per_trial));
    }
    if let Some(p) = &options.partition {
        cmd.arg(format!("--partition={p}"));
    }
    cmd.args(&options.extra_args).arg(&script_path);
    let out = cmd.output().map_err(|e| format!("cannot run sbatch: {e}"))?;
    if !out.status.success() {
        return Err(format!("sbatch refused the trial: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    // --parsable prints "jobid" or "jobid;cluster".
    let job_id = String::from_utf8_lossy(&out.stdout).trim().split(';').next().unwrap_or_default().to_owned();
    if job_id.is_empty() {
        return Err("sbatch printed no job id".into());
    }
    Ok(crate::agent::Job::Slurm { job_id, output, last_poll: Instant::now(), unknown_polls: 0 })
}

/// Parses one line of `scontrol show job -o`.
pub fn parse_job_line(line: &str) -> Option<JobState> {
    let field =
        |name: &str| line.split_whitespace().find_map(|kv| kv.strip_prefix(name).and_then(|r| r.strip_prefix('=')));
    let state = field("JobState")?.to_owned();
    let (code, signal) = match field("ExitCode").and_then(|e| e.split_once(':')) {
        Some((c, s)) => (c.parse().ok(), s.parse().ok()),
        None => (None, None),
    };
    Some(JobState { state, exit_code: code, signal })
}

/// The job's state, or None when Slurm cannot say now (the agent asks again later).
pub fn job_state(job_id: &str) -> Option<JobState> {
    let out = Command::new("scontrol").args(["show", "job", "-o", job_id]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    parse_job_line(String::from_utf8_lossy(&out.stdout).lines().next()?)
}

/// Runs a Slurm command in UTC (so it prints times in UTC), waiting at most `within`; answers its
/// standard output when it succeeded.
fn run_utc(program: &str, args: &[&str], within: Duration) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .env("TZ", "UTC")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + within;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    Some(out)
}

/// A time as Slurm prints it in UTC (`2026-11-26T20:00:00`), in ms since the epoch.
pub fn parse_utc_time(text: &str) -> Option<i64> {
    let (date, clock) = text.trim().split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut c = clock.split(':').map(|p| p.parse::<i64>().ok());
    let (h, min, sec) = (c.next()??, c.next()??, c.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || min > 59 || sec > 60 {
        return None;
    }
    // Days from 1970-01-01 to y-m-d (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + min) * 60_000 + sec * 1000)
}

/// When a job was submitted, in ms since the epoch: `scontrol show job`'s SubmitTime, else
/// `sacct`'s Submit; None when Slurm cannot say within a few seconds.
pub fn submit_time_ms(job_id: &str) -> Option<i64> {
    let within = Duration::from_secs(5);
    let from_scontrol = run_utc("scontrol", &["show", "job", "-o", job_id], within)
        .and_then(|out| out.split_whitespace().find_map(|kv| kv.strip_prefix("SubmitTime=")).and_then(parse_utc_time));
    from_scontrol.or_else(|| {
        run_utc("sacct", &["-j", job_id, "-X", "-n", "-P", "-o", "Submit"], within)
            .and_then(|out| out.lines().next().and_then(parse_utc_time))
    })
}

/// The job's final state from Slurm's accounting (`sacct`), for a job `scontrol` no longer knows.
pub fn accounted_state(job_id: &str) -> Option<JobState> {
    let out = Command::new("sacct").args(["-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let (state, exit) = text.lines().next()?.split_once('|')?;
    // "CANCELLED by 0" names who cancelled.
    let state = state.split_whitespace().next()?.to_owned();
    let (code, signal) = exit.trim().split_once(':')?;
    Some(JobState { state, exit_code: code.parse().ok(), signal: signal.parse().ok() })
}

/// Signals every step of the job and its batch script (SIGKILL cancels the job).
pub(crate) fn cancel(job_id: &str, signal: libc::c_int) {
    let mut cmd = Command::new("scancel");
    if signal != libc::SIGKILL {
        let name = if signal == libc::SIGTERM { "TERM" } else { "INT" };
        cmd.args(["--full", &format!("--signal={name}")]);
    }
    if let Err(e) = cmd.arg(job_id).status() {
        eprintln!("trainlog agent: cannot run scancel for job {job_id}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn slurm_times_read_as_utc() {
        assert_eq!(parse_utc_time("1970-01-01T00:00:00"), Some(0));
        assert_eq!(parse_utc_time("2026-11-26T12:00:00"), Some(1_795_694_400_000));
        assert_eq!(parse_utc_time("2024-02-29T23:59:59\n"), Some(1_709_251_199_000));
        assert_eq!(parse_utc_time("Unknown"), None);
        assert_eq!(parse_utc_time("2026-13-01T00:00:00"), None);
    }

    #[test]
    fn scontrol_lines_give_state_exit_code_and_signal() {
        let line = "JobId=7 JobName=t UserId=root(0) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) ExitCode=3:0 RunTime=00:00:02";
        assert_eq!(
            parse_job_line(line),
            Some(JobState { state: "FAILED".into(), exit_code: Some(3), signal: Some(0) })
        );
        let pending = parse_job_line("JobId=8 JobState=PENDING Reason=Resources ExitCode=0:0").unwrap();
        assert!(!pending.is_final());
        assert!(parse_job_line("JobId=9 JobState=NODE_FAIL ExitCode=0:9").unwrap().is_final());
    }

    #[test]
    fn the_batch_script_exports_the_trial_and_quotes_its_command() {
        let a = json!({"sweep_id": "s1", "index": 4, "attempt": 1, "run_id": "r4", "project": "p",
                       "command": ["python", "train it.py"], "params": {"lr": 0.01, "name": "it's"}});
        let script = batch_script(&a, "http://127.0.0.1:7310").unwrap();
        assert!(script.contains("export TRAINLOG_RUN_ID=r4\n"), "{script}");
        assert!(script.contains("export TRAINLOG_SWEEP_PARAMS='{\"lr\":0.01,\"name\":\"it'\\''s\"}'"), "{script}");
        assert!(script.ends_with("exec python 'train it.py' --lr=0.01 '--name=it'\\''s'\n"), "{script}");
    }
}
