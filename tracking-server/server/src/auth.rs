//! API keys, when the server runs with `--auth`: every documented route but `GET
//! /api/v1/health` needs `Authorization: Bearer KEY` (or HTTP basic auth with the user's name
//! and the key as password). Verified keys are cached, so a key check costs ingest a hash and
//! a map lookup; the cache is dropped whenever a key is revoked or a user removed, here or by
//! another process on the same data folder.

use crate::error::ApiError;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method};
use actix_web::middleware::Next;
use actix_web::{web, HttpMessage, HttpRequest, ResponseError};
use base64::Engine;
use ring::digest::{digest, SHA256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use trainlog_meta::auth::Caller;
use trainlog_meta::MetaStore;

/// How often the server looks for keys revoked by another process.
const GENERATION_POLL: Duration = Duration::from_millis(200);
/// How often last-used times are written.
const LAST_USED_FLUSH: Duration = Duration::from_secs(30);

pub struct Auth {
    enabled: bool,
    meta: Arc<MetaStore>,
    /// Verified keys by the SHA-256 of their text.
    verified: Mutex<HashMap<[u8; 32], Caller>>,
    generation: AtomicI64,
    /// Key id → when it was last used, not yet written.
    used: Mutex<HashMap<String, i64>>,
}

impl Auth {
    pub fn new(enabled: bool, meta: Arc<MetaStore>) -> Self {
        Auth {
            enabled,
            meta,
            verified: Mutex::new(HashMap::new()),
            generation: AtomicI64::new(i64::MIN),
            used: Mutex::new(HashMap::new()),
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
                            lock(&auth.verified).clear();
                        }
                    }
                    // Without the generation, keys revoked elsewhere could go on working: verify
                    // every key again until it can be read.
                    Ok(Err(e)) => {
                        tracing::warn!("reading the key generation failed: {e}; verifying every key again");
                        lock(&auth.verified).clear();
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
        let hash: [u8; 32] = digest(&SHA256, key.as_bytes()).as_ref().try_into().unwrap_or([0; 32]);
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

/// Whether a request needs a key: everything the API describes but its health check.
fn needs_key(req: &HttpRequest) -> bool {
    let path = req.path();
    let health = path == "/api/v1/health" && matches!(*req.method(), Method::GET | Method::HEAD);
    (path.starts_with("/api/v1/") || path == "/metrics") && !health
}

/// The caller of a request, when the server checks keys.
pub fn caller(req: &HttpRequest) -> Option<Caller> {
    req.extensions().get::<Caller>().cloned()
}

/// Middleware: answers 401 to a request that needs a key and has no valid one.
pub async fn authenticate(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let auth = req.app_data::<web::Data<Arc<Auth>>>().map(|a| a.get_ref().clone());
    let Some(auth) = auth.filter(|a| a.enabled && needs_key(req.request())) else {
        return Ok(next.call(req).await?.map_into_left_body());
    };
    let refused = match presented(req.request()) {
        None => Err(ApiError::Unauthenticated(
            "this server needs an API key: send Authorization: Bearer KEY (trainlog users add, trainlog keys create)"
                .into(),
        )),
        Some((claimed_user, key)) => match auth.caller(&key).await {
            Ok(Some(c)) if claimed_user.as_ref().is_none_or(|u| *u == c.name) => Ok(c),
            Ok(_) => {
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
            let response = e.error_response();
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
    fn the_health_check_and_the_ui_need_no_key() {
        let at = |m: Method, p: &str| needs_key(&TestRequest::default().method(m).uri(p).to_http_request());
        assert!(!at(Method::GET, "/api/v1/health"));
        assert!(!at(Method::GET, "/"));
        assert!(!at(Method::GET, "/app.js"));
        assert!(at(Method::POST, "/api/v1/health"));
        assert!(at(Method::GET, "/api/v1/openapi.json"));
        assert!(at(Method::GET, "/metrics"));
        assert!(at(Method::POST, "/api/v1/runs"));
    }
}
