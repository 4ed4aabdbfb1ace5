//! HTTPS with the self-signed certificate `openssl req -x509` makes by default, which calls
//! itself a CA (`CA:TRUE`): the SDK and the command line trust it when `SSL_CERT_FILE` names that
//! very certificate, as curl does, and still refuse a certificate not named, and one named but
//! made for another host. One test in this binary, as it sets the environment.

use std::path::{Path, PathBuf};
use std::process::Command;
use trainlog_tests::{binary, TestServer};

/// Exactly what a user types, from the README: answers (cert, key).
fn openssl_self_signed(dir: &Path, name: &str, alt_names: &str) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .args(["-days", "30", "-subj", &format!("/CN={name}"), "-addext", &format!("subjectAltName={alt_names}")])
        .output()
        .expect("openssl runs");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    let text = Command::new("openssl").args(["x509", "-noout", "-text", "-in"]).arg(&cert).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains("CA:TRUE"), "OpenSSL 3 makes a CA certificate by default");
    (cert, key)
}

fn serve(cert: &Path, key: &Path) -> TestServer {
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    TestServer::spawn_local_with(&["--tls-cert", &cert, "--tls-key", &key])
}

#[test]
fn a_self_signed_ca_certificate_named_in_ssl_cert_file_is_trusted_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = openssl_self_signed(&dir.path().join("server"), "localhost", "IP:127.0.0.1,DNS:localhost");
    let (other, _) = openssl_self_signed(&dir.path().join("other"), "localhost", "IP:127.0.0.1,DNS:localhost");
    let (elsewhere, elsewhere_key) =
        openssl_self_signed(&dir.path().join("elsewhere"), "elsewhere", "DNS:elsewhere.example");
    let s = serve(&cert, &key);
    assert!(s.url.starts_with("https://127.0.0.1:"), "{}", s.url);

    // curl, as the user checks it first.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "30", "--cacert"])
        .arg(&cert)
        .arg(format!("{}/api/v1/health", s.url))
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // The command line: trusted by name, refused unnamed and for another certificate.
    let cli = |url: &str, bundle: Option<&Path>| {
        let mut cmd = Command::new(binary());
        cmd.args(["models", "list", "--server", url]).env_remove("SSL_CERT_FILE").env_remove("REQUESTS_CA_BUNDLE");
        if let Some(bundle) = bundle {
            cmd.env("SSL_CERT_FILE", bundle);
        }
        cmd.output().expect("trainlog runs")
    };
    let trusted = cli(&s.url, Some(&cert));
    assert!(trusted.status.success(), "{}", String::from_utf8_lossy(&trusted.stderr));
    for bundle in [None, Some(other.as_path())] {
        let refused = cli(&s.url, bundle);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{bundle:?}: {stderr}");
        assert!(stderr.contains("certificate") && stderr.contains("SSL_CERT_FILE"), "{bundle:?}: {stderr}");
    }
    // A bundle of several certificates, the server's among them, trusts it too.
    let both = dir.path().join("both.pem");
    let text = [std::fs::read_to_string(&other).unwrap(), std::fs::read_to_string(&cert).unwrap()].concat();
    std::fs::write(&both, text).unwrap();
    assert!(cli(&s.url, Some(&both)).status.success());
    // Named, but made for another host: the name is still checked.
    let misnamed = serve(&elsewhere, &elsewhere_key);
    let refused = cli(&misnamed.url, Some(&elsewhere));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("certificate"), "{stderr}");

    // The Rust SDK, as `trainlog.init` uses it.
    std::env::remove_var("REQUESTS_CA_BUNDLE");
    std::env::set_var("TRAINLOG_DIR", dir.path().join("home"));
    std::env::set_var("SSL_CERT_FILE", &other);
    let refused = trainlog::Run::builder("tls").server(&s.url).system_metrics(None).start();
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("certificate"), "{message}");
    std::env::set_var("SSL_CERT_FILE", &cert);
    trainlog_tests::log_a_run_and_read_it_back(&s.url);
}
