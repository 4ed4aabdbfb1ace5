//! What trips a new user in the first hour, through the real binary: one server per data folder
//! (a second one refuses and names the first, and takes nothing of its write-ahead log), the
//! commands that act on a data folder never make one up, and a reader that goes away ends a
//! command quietly.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use trainlog_tests::{binary, json, TestServer};

/// Waits for a process that should exit by itself; kills it (failing the test) past a minute.
fn exit_of(mut child: std::process::Child) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("waiting on a process") {
            let mut stderr = String::new();
            if let Some(mut err) = child.stderr.take() {
                std::io::Read::read_to_string(&mut err, &mut stderr).expect("its stderr");
            }
            return (status, stderr);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_second_server_on_a_data_folder_in_use_refuses_naming_the_first_and_takes_nothing() {
    let mut first = TestServer::spawn_local();
    let run = first.create_run("locked", "r");
    let steps: Vec<i64> = (0..1000).collect();
    let points: Vec<_> = steps.iter().map(|s| json!({"key": "loss", "step": s, "value": *s as f64})).collect();
    assert_eq!(first.log(&run, json!(points)).0, 200);

    let mut second = Command::new(binary());
    second.args(["server", "--host", "127.0.0.1", "--port", "0", "--data"]).arg(&first.data);
    if let Some(url) = &first.meta_url {
        second.args(["--meta", url]);
    }
    let child = second
        .env_remove("TRAINLOG_DATA")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let (status, stderr) = exit_of(child);
    assert!(!status.success(), "a second server on the folder started: {stderr}");
    let holder = format!("in use by trainlog server pid {} at {}", first.pid().expect("running"), first.url);
    assert!(stderr.contains(&holder), "{stderr}");

    // The first server goes on, and what it acknowledged survives its crash and restart.
    assert_eq!(first.get("/health").0, 200);
    first.kill9();
    first.restart();
    assert_eq!(first.series(&run, "loss").len(), 1000);
}

#[test]
fn data_folder_commands_refuse_a_folder_that_is_not_a_servers() {
    let here = tempfile::tempdir().expect("a folder");
    let cli = |args: &[&str]| {
        Command::new(binary())
            .args(args)
            .current_dir(here.path())
            .env_remove("TRAINLOG_DATA")
            .env_remove("TRAINLOG_META")
            .output()
            .expect("the binary runs")
    };
    for args in [&["users", "add", "alice"][..], &["keys", "list"], &["grant", "alice", "p", "read"]] {
        let out = cli(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("no data folder at ./trainlog-data") && stderr.contains("--data"), "{stderr}");
    }
    assert!(!here.path().join("trainlog-data").exists(), "no folder was made");

    std::fs::create_dir(here.path().join("empty")).expect("a folder");
    let out = cli(&["users", "add", "alice", "--data", "empty"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("holds no trainlog.db") && stderr.contains("--meta"), "{stderr}");
    assert_eq!(std::fs::read_dir(here.path().join("empty")).expect("the folder").count(), 0);
}

#[test]
fn a_reader_that_goes_away_ends_a_command_quietly() {
    let server = TestServer::spawn_local_with(&["--auth"]);
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let mut cmd = Command::new(binary());
    cmd.args(["keys", "list", "--data"]).arg(&server.data).env_remove("TRAINLOG_META");
    if let Some(url) = &server.meta_url {
        cmd.args(["--meta", url]);
    }
    let child = cmd.stdout(writer).stderr(Stdio::piped()).spawn().expect("the binary starts");
    let (status, stderr) = exit_of(child);
    assert_eq!(status.signal(), Some(13), "ended by SIGPIPE as other tools are: {status:?} {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
