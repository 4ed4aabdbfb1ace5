//! API keys, when the server runs with `--auth`: every request needs `Authorization: Bearer
//! KEY` (or HTTP basic auth with the user's name and the key as password) but the few on
//! [`is_open`]'s list, decided on the path the router matches. Verified keys are cached, so a
//! key check costs ingest a hash and a map lookup; the cache is dropped whenever a key is
//! revoked or a user removed, here or by another process on the same data folder.

use crate::error::ApiError;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method};
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage, HttpRequest, ResponseError};
use base64::Engine;
use ring::digest::{digest, SHA256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trainlog_meta::auth::Caller;
use trainlog_meta::{Actor, MetaStore, Role, Scope, Visibility};
use trainlog_schema::RunId;

/// How often the server looks for keys revoked by another process.
const GENERATION_POLL: Duration = Duration::from_millis(200);
/// How often last-used times are written.
const LAST_USED_FLUSH: Duration = Duration::from_secs(30);
/// Failed key checks one address may make in [`FAILURE_WINDOW`] by default; past them its
/// requests are answered 429 until the window ends, without checking a key.
pub const DEFAULT_MAX_KEY_FAILURES: u32 = 20;
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Addresses whose failures are remembered at most; beyond, the oldest windows are dropped.
const MAX_TRACKED_ADDRESSES: usize = 10_000;

/// Failed key checks: counted for `/metrics`, and throttled per address.
struct Failures {
    /// Failures an address may make in a window; 0: no limit.
    max: u32,
    by_address: HashMap<IpAddr, (Instant, u32)>,
    failed: u64,
    throttled: u64,
}

impl Failures {
    /// When the address has used up its failures, the time until its window ends.
    fn new(max: u32) -> Self {
        Failures { max, by_address: HashMap::new(), failed: 0, throttled: 0 }
    }

    fn throttled_for(&mut self, address: IpAddr, now: Instant) -> Option<Duration> {
        if self.max == 0 {
            return None;
        }
        let &(start, count) = self.by_address.get(&address)?;
        let left = FAILURE_WINDOW.checked_sub(now.duration_since(start)).filter(|left| !left.is_zero())?;
        (count >= self.max).then(|| {
            self.throttled += 1;
            left
        })
    }

    fn record(&mut self, address: Option<IpAddr>, now: Instant) {
        self.failed += 1;
        let Some(address) = address.filter(|_| self.max > 0) else { return };
        if self.by_address.len() >= MAX_TRACKED_ADDRESSES && !self.by_address.contains_key(&address) {
            self.by_address.retain(|_, (start, _)| now.duration_since(*start) < FAILURE_WINDOW);
            if self.by_address.len() >= MAX_TRACKED_ADDRESSES {
                return;
            }
        }
        let window = self.by_address.entry(address).or_insert((now, 0));
        if now.duration_since(window.0) >= FAILURE_WINDOW {
            *window = (now, 0);
        }
        window.1 += 1;
    }
}

/// Failed key checks since the server started, and requests refused for too many of them.
pub fn failure_counts(req: &HttpRequest) -> (u64, u64) {
    auth_of(req).map_or((0, 0), |a| {
        let f = lock(&a.failures);
        (f.failed, f.throttled)
    })
}

/// What a request presenting the scraper's key (`--metrics-key-file`) is marked with.
#[derive(Clone, Copy)]
pub struct MetricsScraper;

pub struct Auth {
    enabled: bool,
    /// What a user gets on a project or model they hold no role of their own on.
    default_role: Role,
    meta: Arc<MetaStore>,
    /// Verified keys by the SHA-256 of their text.
    verified: Mutex<HashMap<[u8; 32], Caller>>,
    /// Roles looked up, by user and project or model; dropped with the keys.
    roles: Mutex<HashMap<(i64, Scope, i64), Role>>,
    generation: AtomicI64,
    /// Key id → when it was last used, not yet written.
    used: Mutex<HashMap<String, i64>>,
    failures: Mutex<Failures>,
    /// The SHA-256 of the key a metrics scraper may read all of `/metrics` with.
    metrics_key: Option<[u8; 32]>,
}

impl Auth {
    pub fn new(
        enabled: bool,
        default_role: Role,
        meta: Arc<MetaStore>,
        metrics_key: Option<&str>,
        max_key_failures: u32,
    ) -> Self {
        Auth {
            enabled,
            default_role,
            meta,
            verified: Mutex::new(HashMap::new()),
            roles: Mutex::new(HashMap::new()),
            generation: AtomicI64::new(i64::MIN),
            used: Mutex::new(HashMap::new()),
            failures: Mutex::new(Failures::new(max_key_failures)),
            metrics_key: metrics_key.map(sha256),
        }
    }

    /// Keeps the cache honest and last-used times written, until the server stops.
    pub fn spawn_upkeep(self: &Arc<Self>) {
        if !self.enabled {
            return;
        }
        let auth = self.clone();
        actix_web::rt::spawn(async move {
            let mut since_flush = Duration::ZERO;
            loop {
                actix_web::rt::time::sleep(GENERATION_POLL).await;
                since_flush += GENERATION_POLL;
                let meta = auth.meta.clone();
                match web::block(move || meta.auth_generation()).await {
                    Ok(Ok(g)) => {
                        if auth.generation.swap(g, Ordering::SeqCst) != g {
                            auth.forget();
                        }
                    }
                    // Without the generation, keys revoked elsewhere could go on working: verify
                    // every key again until it can be read.
                    Ok(Err(e)) => {
                        tracing::warn!("reading the key generation failed: {e}; verifying every key again");
                        auth.forget();
                    }
                    Err(e) => tracing::warn!("reading the key generation failed: {e}"),
                }
                if since_flush >= LAST_USED_FLUSH {
                    since_flush = Duration::ZERO;
                    auth.flush_last_used().await;
                }
            }
        });
    }

    /// Drops every cached key and role, after a change that may take access away.
    pub fn forget(&self) {
        lock(&self.verified).clear();
        lock(&self.roles).clear();
    }

    fn actor(&self, caller: Caller) -> Actor {
        Actor { user_id: caller.user_id, name: caller.name, is_admin: caller.is_admin, default_role: self.default_role }
    }

    async fn role(&self, actor: &Actor, scope: Scope, id: i64) -> Result<Role, ApiError> {
        if actor.is_admin {
            return Ok(Role::Admin);
        }
        let cache_key = (actor.user_id, scope, id);
        if let Some(&role) = lock(&self.roles).get(&cache_key) {
            return Ok(role);
        }
        let (meta, owned) = (self.meta.clone(), actor.clone());
        let role = web::block(move || meta.role(&owned, scope, id)).await??;
        lock(&self.roles).insert(cache_key, role);
        Ok(role)
    }

    async fn flush_last_used(&self) {
        let used: Vec<(String, i64)> = lock(&self.used).drain().collect();
        let meta = self.meta.clone();
        match web::block(move || meta.touch_keys(&used)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("writing when keys were last used failed: {e}"),
            Err(e) => tracing::warn!("writing when keys were last used failed: {e}"),
        }
    }

    async fn caller(&self, key: &str) -> Result<Option<Caller>, ApiError> {
        let hash = sha256(key);
        if let Some(c) = lock(&self.verified).get(&hash) {
            return Ok(Some(c.clone()));
        }
        let (meta, owned) = (self.meta.clone(), key.to_owned());
        let found = web::block(move || meta.verify_key(&owned)).await??;
        if let Some(c) = &found {
            lock(&self.verified).insert(hash, c.clone());
        }
        Ok(found)
    }
}

fn sha256(text: &str) -> [u8; 32] {
    digest(&SHA256, text.as_bytes()).as_ref().try_into().unwrap_or([0; 32])
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The key a request carries: `Bearer KEY`, or basic auth whose password is the key (with the
/// user name it claims).
fn presented(req: &HttpRequest) -> Option<(Option<String>, String)> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    match scheme.to_ascii_lowercase().as_str() {
        "bearer" => Some((None, rest.trim().to_owned())),
        "basic" => {
            let decoded = base64::engine::general_purpose::STANDARD.decode(rest.trim()).ok()?;
            let text = String::from_utf8(decoded).ok()?;
            let (user, key) = text.split_once(':')?;
            Some((Some(user.to_owned()), key.to_owned()))
        }
        _ => None,
    }
}

/// The health checks, open to load balancers and orchestrators.
const HEALTH: [&str; 3] = ["/api/v1/health", "/api/v1/health/live", "/api/v1/health/ready"];

/// Whether a request is served without a key: reading the health checks and the UI's own files,
/// nothing else. A route added later needs a key until it is put here on purpose.
pub fn is_open(method: &Method, routed_path: &str) -> bool {
    matches!(*method, Method::GET | Method::HEAD) && (HEALTH.contains(&routed_path) || crate::ui::is_asset(routed_path))
}

fn needs_key(req: &HttpRequest) -> bool {
    !is_open(req.method(), crate::guard::routed_path(req))
}

/// The caller of a request, when the server checks keys.
pub fn caller(req: &HttpRequest) -> Option<Caller> {
    req.extensions().get::<Caller>().cloned()
}

fn auth_of(req: &HttpRequest) -> Option<Arc<Auth>> {
    req.app_data::<web::Data<Arc<Auth>>>().map(|a| a.get_ref().clone()).filter(|a| a.enabled)
}

/// Whether the server checks keys.
pub fn enabled(req: &HttpRequest) -> bool {
    auth_of(req).is_some()
}

/// The role users get on what they hold no role of their own on.
pub fn default_role(req: &HttpRequest) -> Role {
    auth_of(req).map_or(Role::Admin, |a| a.default_role)
}

/// Who a request acts for, with the server's default role; None when keys are off.
pub fn actor(req: &HttpRequest) -> Option<Actor> {
    Some(auth_of(req)?.actor(caller(req)?))
}

/// Refuses a request whose caller holds less than `need` on a project or model: 404 when they
/// may not even read it, 403 otherwise.
pub async fn require(req: &HttpRequest, scope: Scope, id: i64, name: &str, need: Role) -> Result<(), ApiError> {
    let (Some(auth), Some(caller)) = (auth_of(req), caller(req)) else { return Ok(()) };
    let actor = auth.actor(caller);
    let has = auth.role(&actor, scope, id).await?;
    Ok(trainlog_meta::roles::check(&actor, scope, name, has, need)?)
}

/// The caller's role on a project or model: admin when the server checks no keys.
pub async fn role_on(req: &HttpRequest, scope: Scope, id: i64) -> Result<Role, ApiError> {
    let (Some(auth), Some(caller)) = (auth_of(req), caller(req)) else { return Ok(Role::Admin) };
    auth.role(&auth.actor(caller), scope, id).await
}

/// As `require`, for the project a run belongs to; a run the caller may not read is not found.
pub async fn require_run(req: &HttpRequest, run: &RunId, project_id: i64, need: Role) -> Result<(), ApiError> {
    require_in_project(req, project_id, need, || format!("run {run}")).await
}

/// As `require`, for something inside a project (a run, a sweep): when the caller may not read
/// the project, that thing is not found, named by `what`.
pub async fn require_in_project(
    req: &HttpRequest,
    project_id: i64,
    need: Role,
    what: impl FnOnce() -> String,
) -> Result<(), ApiError> {
    let (Some(auth), Some(caller)) = (auth_of(req), caller(req)) else { return Ok(()) };
    let actor = auth.actor(caller);
    let has = auth.role(&actor, Scope::Project, project_id).await?;
    if has >= need {
        return Ok(());
    }
    if has < Role::Read {
        return Err(ApiError::NotFound(what()));
    }
    let meta = auth.meta.clone();
    let project = web::block(move || meta.project_by_id(project_id)).await??;
    Ok(trainlog_meta::roles::check(&actor, Scope::Project, &project.name, has, need)?)
}

/// What projects or models the caller may read.
pub async fn visibility(req: &HttpRequest, scope: Scope) -> Result<Visibility, ApiError> {
    let Some(actor) = actor(req) else { return Ok(Visibility::All) };
    let meta = auth_of(req).map(|a| a.meta.clone()).ok_or_else(|| ApiError::Internal("no auth state".into()))?;
    Ok(web::block(move || meta.visibility(&actor, scope)).await??)
}

/// Refuses a request from anyone but a server admin (when keys are checked).
pub fn require_admin(req: &HttpRequest, what: &str) -> Result<(), ApiError> {
    match actor(req) {
        Some(a) if !a.is_admin => Err(ApiError::Forbidden {
            field: "user".into(),
            reason: format!("{what} is for server admins; {} is not one", a.name),
        }),
        _ => Ok(()),
    }
}

/// Drops cached keys and roles after a change made through the API, so it holds at once.
pub fn forget(req: &HttpRequest) {
    if let Some(auth) = auth_of(req) {
        auth.forget();
    }
}

/// Middleware: answers 401 to a request that needs a key and has no valid one, and 429 to an
/// address that failed too many key checks in a row.
pub async fn authenticate(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let Some(auth) = auth_of(req.request()).filter(|_| needs_key(req.request())) else {
        return Ok(next.call(req).await?.map_into_left_body());
    };
    let address = req.peer_addr().map(|a| a.ip());
    let now = Instant::now();
    let (throttled, max_failures) = {
        let mut failures = lock(&auth.failures);
        (address.and_then(|a| failures.throttled_for(a, now)), failures.max)
    };
    let refused = match (throttled, presented(req.request())) {
        (Some(left), _) => Err(ApiError::TooManyRequests {
            reason: format!(
                "too many failed key checks from this address ({max_failures} in {} s); try again in {} s",
                FAILURE_WINDOW.as_secs(),
                left.as_secs() + 1
            ),
            retry_after_s: left.as_secs() + 1,
        }),
        (None, None) => Err(ApiError::Unauthenticated(
            "this server needs an API key: send Authorization: Bearer KEY (trainlog users add, trainlog keys create)"
                .into(),
        )),
        (None, Some((None, key)))
            if auth.metrics_key.is_some_and(|k| k == sha256(&key))
                && crate::guard::routed_path(req.request()) == "/metrics" =>
        {
            req.extensions_mut().insert(MetricsScraper);
            return Ok(next.call(req).await?.map_into_left_body());
        }
        (None, Some((claimed_user, key))) => match auth.caller(&key).await {
            Ok(Some(c)) if claimed_user.as_ref().is_none_or(|u| *u == c.name) => Ok(c),
            Ok(_) => {
                lock(&auth.failures).record(address, now);
                Err(ApiError::Unauthenticated("the API key is not valid: unknown, revoked, or not this user's".into()))
            }
            Err(e) => Err(e),
        },
    };
    match refused {
        Ok(c) => {
            lock(&auth.used).insert(c.key_id.clone(), trainlog_meta::now_ms());
            req.extensions_mut().insert(c);
            Ok(next.call(req).await?.map_into_left_body())
        }
        Err(e) => {
            let response = if crate::error::is_mlflow_path(crate::guard::routed_path(req.request())) {
                let mut response = crate::error::mlflow_response(&e, None);
                if let ApiError::Unauthenticated(_) = e {
                    response
                        .headers_mut()
                        .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Basic realm=\"trainlog\""));
                }
                response
            } else {
                e.error_response()
            };
            Ok(req.into_response(response).map_into_right_body())
        }
    }
}

/// With `--auth` and no user yet: creates `admin` and writes its key to `DATA/admin.key`, readable
/// by this user only. Answers the file's path when it made one.
pub fn bootstrap_admin(meta: &MetaStore, data_dir: &std::path::Path) -> Result<Option<std::path::PathBuf>, String> {
    if meta.has_users().map_err(|e| e.to_string())? {
        return Ok(None);
    }
    let key = meta.add_user("admin", true).map_err(|e| format!("creating the admin user: {e}"))?;
    let path = data_dir.join("admin.key");
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    writeln!(file, "{}", key.key)
        .and_then(|_| file.sync_all())
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn keys_are_read_from_bearer_and_basic_headers() {
        let bearer = TestRequest::default().insert_header(("authorization", "Bearer tl_abc")).to_http_request();
        assert_eq!(presented(&bearer), Some((None, "tl_abc".to_owned())));
        let basic = base64::engine::general_purpose::STANDARD.encode("ada:tl_abc");
        let basic = TestRequest::default().insert_header(("authorization", format!("Basic {basic}"))).to_http_request();
        assert_eq!(presented(&basic), Some((Some("ada".to_owned()), "tl_abc".to_owned())));
        let other = TestRequest::default().insert_header(("authorization", "Digest x")).to_http_request();
        assert_eq!(presented(&other), None);
    }

    #[test]
    fn an_address_is_throttled_after_its_failures_until_its_window_ends() {
        let mut f = Failures::new(DEFAULT_MAX_KEY_FAILURES);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..DEFAULT_MAX_KEY_FAILURES {
            assert_eq!(f.throttled_for(a, t0), None);
            f.record(Some(a), t0);
        }
        assert!(f.throttled_for(a, t0 + Duration::from_secs(1)).is_some());
        assert_eq!(f.throttled_for(b, t0), None, "another address is not");
        assert_eq!(f.throttled_for(a, t0 + FAILURE_WINDOW), None, "the window ended");
        f.record(Some(a), t0 + FAILURE_WINDOW);
        assert_eq!(f.by_address[&a].1, 1, "a new window starts");
        assert_eq!((f.failed, f.throttled), (u64::from(DEFAULT_MAX_KEY_FAILURES) + 1, 1));
        let mut unlimited = Failures::new(0);
        for _ in 0..1000 {
            unlimited.record(Some(a), t0);
        }
        assert_eq!(unlimited.throttled_for(a, t0), None);
        assert!(unlimited.by_address.is_empty());
    }

    #[test]
    fn only_the_health_check_and_the_ui_files_need_no_key() {
        let at = |m: Method, p: &str| needs_key(&TestRequest::default().method(m).uri(p).to_http_request());
        assert!(!at(Method::GET, "/api/v1/health"));
        assert!(!at(Method::HEAD, "/api/v1/health/live"));
        assert!(!at(Method::GET, "/api/v1/health/ready"));
        assert!(!at(Method::GET, "/"));
        assert!(!at(Method::GET, "/ui/app.js"));
        assert!(!at(Method::GET, "/%75i/app.js"), "decoded as the router decodes it");
        assert!(at(Method::POST, "/api/v1/health"));
        assert!(at(Method::GET, "/api/v1/openapi.json"));
        assert!(at(Method::GET, "/metrics"));
        assert!(at(Method::GET, "/%6detrics"));
        assert!(at(Method::POST, "/api/v1/runs"));
        assert!(at(Method::GET, "/%61pi/v1/projects"));
        assert!(at(Method::GET, "/api/2%2E0/mlflow/experiments/search"));
        assert!(at(Method::GET, "/app.js"), "not a UI file: a path no route takes");
        assert!(at(Method::GET, "/anything/else"));
        assert!(at(Method::OPTIONS, "/api/v1/health"));
    }
}
