//! What a server keeps on disk is its user's alone: the data folder and everything in it (the
//! database and its log, the write-ahead log, metric files, media and artifacts) is created
//! owner-only, and a folder left readable by an older server is tightened on start, with a line
//! saying so.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use trainlog_tests::{binary, json, TestServer};

/// Every entry below `dir` (itself included) whose mode lets the group or others in.
fn readable_by_others(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).expect("an entry");
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            found.push((path.clone(), mode));
        }
        if meta.is_dir() {
            pending.extend(std::fs::read_dir(&path).expect("a folder").map(|e| e.expect("an entry").path()));
        }
    }
    found
}

fn count_entries(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.expect("an entry").path())
                .map(|p| 1 + if p.is_dir() { count_entries(&p) } else { 0 })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn the_data_folder_is_owner_only_and_an_old_one_is_tightened_on_start() {
    let mut s = TestServer::spawn_local_with(&["--auth"]);
    let run = s.create_run("p", "r");
    assert_eq!(s.log(&run, json!([{"key": "loss", "step": 1, "value": 0.5}])).0, 200);
    let put = s.client.put(s.api(&format!("/runs/{run}/artifacts/model.bin"))).body(b"weights".to_vec()).send();
    assert_eq!(put.expect("the server answers").status().as_u16(), 201);
    s.flush();
    let entries = count_entries(&s.data);
    assert!(entries >= 4, "the folder holds the write-ahead log, metric files and artifacts: {entries}");
    assert_eq!(readable_by_others(&s.data), vec![], "everything is owner-only");
    assert!(s.terminate(), "the server stops");

    // As an older server left it: folders 0755, files 0644.
    let mut pending = vec![s.data.clone()];
    while let Some(path) = pending.pop() {
        let dir = path.is_dir();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(if dir { 0o755 } else { 0o644 })).unwrap();
        if dir {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    let opened = readable_by_others(&s.data).len();
    assert_eq!(opened, entries + 1);

    let mut child = Command::new(binary())
        .args(["server", "--auth", "--host", "127.0.0.1", "--port", "0", "--data"])
        .arg(&s.data)
        .args(s.meta_url.iter().flat_map(|url| ["--meta", url.as_str()]))
        .env_remove("TRAINLOG_META")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("trainlog starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.contains("listening on") {
                let _ = tx.send(());
            }
        }
    });
    let ready = rx.recv_timeout(Duration::from_secs(60));
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    assert!(ready.is_ok(), "the server started: {stderr}");
    assert!(stderr.contains(&format!("trainlog: {opened} files and folders in ")), "{stderr}");
    assert!(stderr.contains("were readable by others; now only by their owner"), "{stderr}");
    assert_eq!(readable_by_others(&s.data), vec![], "tightened");
}
