//! Start-up: the server's configuration, opening the stores, binding (with TLS when asked),
//! serving until SIGINT or SIGTERM, and persisting what is buffered on the way out.

use crate::state::AppState;
use crate::{auth, guard, routes, ui};
use actix_web::{web, App, HttpServer};
use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use trainlog_meta::MetaStore;
use trainlog_store::{MetricsStore, StoreConfig};

/// Default port of `trainlog server`.
pub const DEFAULT_PORT: u16 = 7310;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    pub data_dir: PathBuf,
    pub store_url: Option<String>,
    /// The metadata database (`postgres://…`, `sqlite:///…`); default the SQLite file in `data_dir`.
    pub meta_url: Option<String>,
    /// A sweep trial whose agent sends no heartbeat for this long is taken as preempted.
    pub trial_timeout: std::time::Duration,
    /// A running job none of whose processes sent a heartbeat for this long ends `lost`.
    pub lost_after: std::time::Duration,
    /// Host names served besides the bound address (`*`: any); see `guard::HostPolicy`.
    pub allowed_hosts: Vec<String>,
    /// Bytes of buffered points above which ingest answers 503 until persisting catches up.
    pub max_buffer_bytes: usize,
    /// Age at which buffered points are written to the object store.
    pub persist_interval: std::time::Duration,
    /// Every API route but the health check needs an API key.
    pub auth: bool,
    /// Serve a non-loopback address without `auth`, for a server behind its own proxy.
    pub insecure_no_auth: bool,
    /// With `auth`: the role users get on projects and models they hold none of their own on.
    pub default_role: trainlog_meta::Role,
    /// Serve HTTPS with this certificate chain and private key (PEM files).
    pub tls: Option<TlsFiles>,
    /// With `auth`: a file holding the key a metrics scraper reads all of `/metrics` with.
    pub metrics_key_file: Option<PathBuf>,
    /// With `auth`: failed key checks an address may make in a minute; 0 for no limit.
    pub max_key_failures: u32,
    /// How long a request body may pause, and the grace before it must keep up 16 KiB/s.
    pub body_timeout: std::time::Duration,
    /// Points one read of series may cost, at most `MAX_QUERY_POINTS`.
    pub max_query_points: u64,
    /// How often the rules on projects' budgets and report figures are checked.
    pub project_rules_every: std::time::Duration,
    /// The SMTP relay for e-mail alerts.
    pub smtp: Option<crate::mail::SmtpConfig>,
}

#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The rustls configuration of a server with a certificate chain and its key.
fn tls_config(files: &TlsFiles) -> Result<rustls::ServerConfig, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("reading the certificate chain {}: {e}", files.cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("reading the private key {}: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "the certificate {} and the key {} do not make a pair: {e}",
                files.cert.display(),
                files.key.display()
            )
        })
}

/// Whether a bind address is reachable from this machine only.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Takes the group's and others' permissions off `dir` and everything below it (links are not
/// followed); answers how many entries had any.
pub fn make_private(dir: &std::path::Path) -> std::io::Result<usize> {
    use std::os::unix::fs::PermissionsExt;
    let mut tightened = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.file_type().is_symlink() {
            continue;
        }
        let mode = meta.permissions().mode();
        if mode & 0o077 != 0 {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o700))?;
            tightened += 1;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                pending.push(entry?.path());
            }
        }
    }
    Ok(tightened)
}

/// The scraper's key: the file's first line, at least 32 characters.
fn read_metrics_key(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("--metrics-key-file {}: {e}", path.display()))?;
    let key = text.lines().next().unwrap_or("").trim().to_owned();
    if key.len() < 32 {
        return Err(format!(
            "--metrics-key-file {}: the key is {} characters; use at least 32 (e.g. `openssl rand -hex 32`)",
            path.display(),
            key.len()
        ));
    }
    Ok(key)
}

/// Opens the stores, serves until SIGINT or SIGTERM, then persists what is buffered.
/// How old an unrecorded metric file, or a media blob no item names, must be before the store
/// deletes it: `TRAINLOG_ORPHAN_MIN_AGE_S` (seconds; 0 collects at once, for tests of a single
/// server), else `default`.
fn orphan_min_age(default: std::time::Duration) -> std::time::Duration {
    std::env::var("TRAINLOG_ORPHAN_MIN_AGE_S")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(default, std::time::Duration::from_secs)
}

pub async fn serve(config: ServerConfig) -> std::io::Result<()> {
    let started = std::time::Instant::now();
    let to_io = |e: String| std::io::Error::other(e);
    if !config.auth && !config.insecure_no_auth && !is_loopback(&config.host) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "refusing to serve {} without authentication: anyone who can reach it could read and change every run. \
                 Add --auth (API keys; see `trainlog users add`), or --insecure-no-auth if a proxy in front of it \
                 checks who calls",
                config.host
            ),
        ));
    }
    let tls = config.tls.as_ref().map(tls_config).transpose().map_err(to_io)?;
    // Everything the server writes (the database, its log, metric files, media, artifacts) is
    // for its own user only: folders 0700, files 0600.
    // SAFETY: umask only swaps the process's creation mask; it cannot fail.
    unsafe { libc::umask(0o077) };
    no_transparent_huge_pages();
    std::fs::create_dir_all(&config.data_dir)?;
    // Held until this function returns: the server's whole life.
    let mut data_lock = crate::data_lock::DataLock::take(&config.data_dir)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::AddrInUse, e))?;
    let tightened = make_private(&config.data_dir)
        .map_err(|e| to_io(format!("making {} private: {e}", config.data_dir.display())))?;
    if tightened > 0 {
        eprintln!(
            "trainlog: {tightened} files and folders in {} were readable by others; now only by their owner",
            config.data_dir.display()
        );
    }
    let meta_url = match &config.meta_url {
        Some(url) => trainlog_meta::MetaUrl::parse(url).map_err(|e| to_io(format!("--meta: {e}")))?,
        None => trainlog_meta::MetaUrl::Sqlite(config.data_dir.join("trainlog.db")),
    };
    let meta_shown = meta_url.redacted();
    let meta = Arc::new(
        tokio::task::spawn_blocking(move || MetaStore::connect(&meta_url))
            .await
            .map_err(|e| to_io(e.to_string()))?
            .map_err(|e| to_io(format!("opening the metadata store {meta_shown}: {e}")))?,
    );
    let defaults = StoreConfig::new(config.data_dir.clone(), config.store_url.clone());
    let store_config = StoreConfig {
        max_buffer_bytes: config.max_buffer_bytes,
        rotate_after: config.persist_interval,
        orphan_min_age: orphan_min_age(defaults.orphan_min_age),
        ..defaults
    };
    if config.auth {
        let (m, dir) = (meta.clone(), config.data_dir.clone());
        let made = tokio::task::spawn_blocking(move || auth::bootstrap_admin(&m, &dir))
            .await
            .map_err(|e| to_io(e.to_string()))?
            .map_err(to_io)?;
        if let Some(path) = made {
            println!("trainlog: created user admin; its API key is in {} (readable by you only)", path.display());
        }
    }
    crate::body::set_body_timeout(config.body_timeout);
    routes::set_max_query_points(config.max_query_points);
    trainlog_meta::jobs::set_lost_after_ms(config.lost_after.as_millis().min(i64::MAX as u128) as i64);
    let metrics_key = config.metrics_key_file.as_deref().map(read_metrics_key).transpose().map_err(to_io)?;
    let auth = Arc::new(auth::Auth::new(
        config.auth,
        config.default_role,
        meta.clone(),
        metrics_key.as_deref(),
        config.max_key_failures,
    ));
    let store = MetricsStore::open(store_config, meta.clone())
        .await
        .map_err(|e| to_io(format!("opening the metrics store: {e}")))?;
    let m = meta.clone();
    let rules = tokio::task::spawn_blocking(move || {
        let cache = crate::rule_cache::RuleCache::default();
        cache.reload(&m).map(|()| cache)
    })
    .await
    .map_err(|e| to_io(e.to_string()))?
    .map_err(|e| to_io(format!("loading the alert rules: {e}")))?;
    let mailer = config.smtp.as_ref().map(crate::mail::Mailer::new).transpose().map_err(to_io)?.map(Arc::new);
    let state = web::Data::new(AppState {
        meta,
        store: store.clone(),
        run_projects: Mutex::new(HashMap::new()),
        sweep_lock: tokio::sync::Mutex::new(()),
        trial_timeout_ms: config.trial_timeout.as_millis() as i64,
        started_ms: trainlog_meta::now_ms(),
        rules,
        mailer,
    });
    let refreshed = state.clone();
    let listener = TcpListener::bind((config.host.as_str(), config.port))?;
    let addr = listener.local_addr()?;
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).max(2);
    let host_policy = web::Data::new(guard::HostPolicy::new(&config.host, &config.allowed_hosts));
    let auth_data = web::Data::new(auth.clone());
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .app_data(host_policy.clone())
            .app_data(auth_data.clone())
            .wrap(actix_web::middleware::from_fn(auth::authenticate))
            .wrap(actix_web::middleware::from_fn(guard::guard))
            .wrap(guard::security_headers())
            .configure(ui::configure)
            .configure(routes::configure)
    })
    .workers(workers)
    .shutdown_timeout(30)
    .disable_signals();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let server = match tls {
        Some(tls) => server.listen_rustls_0_23(listener, tls)?,
        None => server.listen(listener)?,
    }
    .run();
    // Signal handlers are in place before the ready line, so a SIGTERM sent as soon as the
    // server says it is ready still stops it gracefully.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    auth.spawn_upkeep();
    actix_web::rt::spawn(crate::liveness::watch(refreshed.clone()));
    actix_web::rt::spawn(crate::rules::watch_ends(refreshed.clone()));
    actix_web::rt::spawn(crate::rules::watch_activity(refreshed.clone()));
    actix_web::rt::spawn(crate::rules::watch_projects(refreshed.clone(), config.project_rules_every));
    actix_web::rt::spawn(crate::deliver::run(refreshed.clone(), format!("{scheme}://{addr}")));
    actix_web::rt::spawn(crate::report_rows::keep_fresh(refreshed));
    let handle = server.handle();
    actix_web::rt::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        handle.stop(true).await;
    });
    data_lock.say(&format!("trainlog server pid {} at {scheme}://{addr}", std::process::id())).map_err(to_io)?;
    let replay = store.stats();
    println!(
        "trainlog server listening on {scheme}://{addr} (data {}, started in {} ms, replayed {} log records)",
        config.data_dir.display(),
        started.elapsed().as_millis(),
        replay.wal_replayed_records
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    server.await?;
    eprintln!("trainlog: stopping; persisting buffered points");
    store.shutdown().await.map_err(|e| to_io(format!("persisting on shutdown: {e}")))?;
    eprintln!("trainlog: stopped");
    Ok(())
}

/// Turns transparent huge pages off for the server. Its memory comes and goes in small
/// allocations (request bodies, buffered lines); with huge pages each first touch of a fresh
/// region zeroes 2 MiB, which cost a third of the CPU the server spends on console lines.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE only sets a flag of this process; it takes no pointers.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
