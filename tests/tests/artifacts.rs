//! Artifacts end to end: upload, list, download byte for byte, overwrite, delete; a large
//! upload in parts with the server's memory bounded; traversal refused. CI runs these against
//! the local folder and again against an S3-compatible server.

use std::io::{Read, Write};
use trainlog_tests::{json, TestServer, Value};

/// Deterministic bytes, generated as they are read, so a big file never sits in the test's memory.
struct Pattern {
    left: u64,
    at: u64,
}

impl Read for Pattern {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (buf.len() as u64).min(self.left) as usize;
        for b in &mut buf[..n] {
            *b = (self.at.wrapping_mul(2654435761) >> 13) as u8;
            self.at += 1;
        }
        self.left -= n as u64;
        Ok(n)
    }
}

fn sha256_of(mut r: impl Read) -> (u64, String) {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 16];
    let mut size = 0;
    loop {
        let n = r.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
        size += n as u64;
    }
    (size, ctx.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

fn vm_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn put(s: &TestServer, run: &str, path: &str, body: Vec<u8>) -> (u16, Value) {
    let r = s.client.put(s.api(&format!("/runs/{run}/artifacts/{path}"))).body(body).send().unwrap();
    let status = r.status().as_u16();
    (status, r.json().unwrap_or(Value::Null))
}

#[test]
fn storage_artifacts_upload_list_download_overwrite_delete() {
    let s = TestServer::spawn();
    let run = s.create_run("p", "art");
    let small = b"hello artifacts".to_vec();
    let (status, body) = put(&s, &run, "notes/readme.txt", small.clone());
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["size"], small.len());
    assert_eq!(body["sha256"], sha256_of(&small[..]).1);
    let medium: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    assert_eq!(put(&s, &run, "model/weights.bin", medium.clone()).0, 201);

    let (_, list) = s.get(&format!("/runs/{run}/artifacts"));
    let paths: Vec<&str> = list["artifacts"].as_array().unwrap().iter().map(|a| a["path"].as_str().unwrap()).collect();
    assert_eq!(paths, vec!["model/weights.bin", "notes/readme.txt"]);
    let (_, only) = s.get(&format!("/runs/{run}/artifacts?prefix=model/"));
    assert_eq!(only["artifacts"].as_array().unwrap().len(), 1);

    let r = s.client.get(s.api(&format!("/runs/{run}/artifacts/model/weights.bin"))).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["x-trainlog-sha256"].to_str().unwrap(), sha256_of(&medium[..]).1);
    assert_eq!(r.bytes().unwrap().to_vec(), medium, "byte for byte");

    // Overwrite replaces the bytes and the checksum.
    assert_eq!(put(&s, &run, "notes/readme.txt", b"v2".to_vec()).0, 201);
    let r = s.client.get(s.api(&format!("/runs/{run}/artifacts/notes/readme.txt"))).send().unwrap();
    assert_eq!(r.bytes().unwrap().to_vec(), b"v2".to_vec());

    let del = s.client.delete(s.api(&format!("/runs/{run}/artifacts/notes/readme.txt"))).send().unwrap();
    assert_eq!(del.status().as_u16(), 200);
    assert_eq!(s.get(&format!("/runs/{run}/artifacts/notes/readme.txt")).0, 404);
    let del = s.client.delete(s.api(&format!("/runs/{run}/artifacts/notes/readme.txt"))).send().unwrap();
    assert_eq!(del.status().as_u16(), 404);
    assert_eq!(put(&s, "no-such-run", "a.txt", b"x".to_vec()).0, 404);
}

#[test]
fn storage_a_large_upload_goes_in_parts_with_server_memory_bounded() {
    let s = TestServer::spawn();
    let run = s.create_run("p", "big");
    let pid = s.pid().unwrap();
    let size: u64 = 300 << 20;
    let before = vm_kib(pid, "VmRSS:");
    let body = reqwest::blocking::Body::sized(Pattern { left: size, at: 0 }, size);
    let r = s.client.put(s.api(&format!("/runs/{run}/artifacts/ckpt/model.bin"))).body(body).send().unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let uploaded: Value = r.json().unwrap();
    let peak = vm_kib(pid, "VmHWM:");
    let (_, expected_sha) = sha256_of(Pattern { left: size, at: 0 });
    assert_eq!((uploaded["size"].as_u64(), uploaded["sha256"].as_str()), (Some(size), Some(expected_sha.as_str())));
    let grew_mib = peak.saturating_sub(before) / 1024;
    eprintln!("server RSS before {} MiB, peak during a {} MiB upload {} MiB", before / 1024, size >> 20, peak / 1024);
    assert!(grew_mib < 128, "a {} MiB upload grew the server's peak RSS by {grew_mib} MiB", size >> 20);

    let r = s.client.get(s.api(&format!("/runs/{run}/artifacts/ckpt/model.bin"))).send().unwrap();
    let (got_size, got_sha) = sha256_of(r);
    assert_eq!((got_size, got_sha), (size, expected_sha), "downloaded byte for byte");
}

/// Sends a raw request line, so no client normalizes the path first.
fn raw_status(s: &TestServer, method: &str, path: &str) -> (u16, String) {
    let addr = s.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    // A server that never answers fails the test instead of hanging it.
    stream.set_read_timeout(Some(std::time::Duration::from_secs(120))).unwrap();
    write!(stream, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("the server answers and closes the connection");
    let status = answer.split_whitespace().nth(1).unwrap_or("0").parse().unwrap_or(0);
    (status, answer)
}

#[test]
fn storage_artifact_paths_with_traversal_absolute_or_nul_are_refused() {
    let s = TestServer::spawn();
    let run = s.create_run("p", "evil");
    for path in ["../../../etc/passwd", "a/../../b", "%2e%2e/%2e%2e/x", "a/%2E%2E/b", "/etc/passwd", "a%00b", "a/./b"] {
        for method in ["PUT", "GET"] {
            let (status, answer) = raw_status(&s, method, &format!("/api/v1/runs/{run}/artifacts/{path}"));
            assert_eq!(status, 400, "{method} {path}: {answer}");
            assert!(answer.contains("\"field\":\"path\""), "{method} {path}: {answer}");
        }
    }
    let (_, list) = s.get(&format!("/runs/{run}/artifacts"));
    assert_eq!(list["artifacts"], json!([]));
}

#[test]
fn storage_a_corrupted_artifact_is_detected_on_download() {
    let s = TestServer::spawn();
    let run = s.create_run("p", "corrupt");
    let good: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(put(&s, &run, "ckpt/model.bin", good.clone()).0, 201);
    let api = trainlog::Api::new(Some(&s.url)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    api.download_artifact(&run, "ckpt/model.bin", &dir.path().join("ok.bin"), None).unwrap();
    assert_eq!(std::fs::read(dir.path().join("ok.bin")).unwrap(), good);

    let mut bad = good.clone();
    bad[777] ^= 1;
    s.tamper_object(&format!("projects/1/artifacts/{run}/ckpt/model.bin"), &bad);
    match api.download_artifact(&run, "ckpt/model.bin", &dir.path().join("bad.bin"), None) {
        Err(trainlog::Error::Corrupt { expected, actual, .. }) => assert_ne!(expected, actual),
        other => panic!("expected the corruption to be detected, got {other:?}"),
    }
    assert!(!dir.path().join("bad.bin").exists());
}
