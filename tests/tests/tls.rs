//! HTTPS with a self-signed certificate made here: the server serves it with `--tls-cert` and
//! `--tls-key`; curl, the command line and the Rust SDK trust it through `SSL_CERT_FILE`, and
//! refuse it, with a clear error, without. One test in this binary, as it sets the environment.

use std::path::Path;
use std::process::Command;
use trainlog_tests::{binary, TestServer};

/// A self-signed certificate for 127.0.0.1 and localhost, made by openssl; answers (cert, key).
fn self_signed(dir: &Path) -> (String, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    (cert.display().to_string(), key.display().to_string())
}

#[test]
fn https_with_a_self_signed_certificate_for_curl_the_cli_and_the_sdk() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let s = TestServer::spawn_local_with(&["--auth", "--tls-cert", &cert, "--tls-key", &key]);
    assert!(s.url.starts_with("https://127.0.0.1:"), "{}", s.url);
    let admin = s.api_key.clone().expect("an admin key");

    let curl = |args: &[&str]| {
        let out = Command::new("curl").args(["-sS", "--max-time", "30"]).args(args).output().expect("curl runs");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string())
    };
    let (ok, body) = curl(&["--cacert", &cert, &format!("{}/api/v1/health", s.url)]);
    assert!(ok && body.contains("\"ok\""), "{body}");
    let bearer = format!("Authorization: Bearer {admin}");
    let (ok, body) = curl(&["--cacert", &cert, "-H", &bearer, &format!("{}/api/v1/projects", s.url)]);
    assert!(ok && body.contains("projects"), "{body}");
    assert!(!curl(&[&format!("{}/api/v1/health", s.url)]).0, "curl does not trust it without the certificate");
    // Plain HTTP on the HTTPS port gets no API answer.
    let plain = s.url.replacen("https://", "http://", 1);
    assert!(!curl(&["-f", &format!("{plain}/api/v1/health")]).0);

    let cli = |env: &[(&str, &str)]| {
        let mut cmd = Command::new(binary());
        cmd.args(["models", "list", "--server", &s.url]).env("TRAINLOG_API_KEY", &admin);
        cmd.env_remove("SSL_CERT_FILE").env_remove("REQUESTS_CA_BUNDLE");
        cmd.envs(env.iter().copied());
        cmd.output().expect("trainlog runs")
    };
    let untrusted = cli(&[]);
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert!(!untrusted.status.success());
    assert!(stderr.contains("certificate") && stderr.contains("SSL_CERT_FILE"), "{stderr}");
    for var in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"] {
        let trusted = cli(&[(var, &cert)]);
        assert!(trusted.status.success(), "{var}: {}", String::from_utf8_lossy(&trusted.stderr));
    }

    // The Rust SDK: refused at start without the certificate, a whole run with it.
    std::env::set_var("TRAINLOG_API_KEY", &admin);
    std::env::remove_var("SSL_CERT_FILE");
    std::env::set_var("TRAINLOG_DIR", dir.path().join("home"));
    let refused = trainlog::Run::builder("tls").server(&s.url).system_metrics(None).start();
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("certificate"), "{message}");
    std::env::set_var("SSL_CERT_FILE", &cert);
    trainlog_tests::log_a_run_and_read_it_back(&s.url);
}
