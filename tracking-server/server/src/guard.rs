//! Defences at the edge: the request path checked once, so that the key check and the router
//! read the same path; against other web pages using a server that a browser can reach, the
//! `Host` allow list (DNS rebinding) and the same-origin rule for state-changing requests; and
//! the security headers every response carries.

use crate::error::ApiError;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method};
use actix_web::middleware::{DefaultHeaders, Next};
use actix_web::{web, HttpRequest, ResponseError};
use std::net::IpAddr;

/// The UI loads its scripts and styles from this server only and may not be framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// Headers added to every response.
pub fn security_headers() -> DefaultHeaders {
    DefaultHeaders::new()
        .add((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY))
        .add((header::X_FRAME_OPTIONS, "DENY"))
        .add((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .add((header::REFERRER_POLICY, "same-origin"))
}

/// Which names a request's `Host` header may carry.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    /// `None`: any host (a wildcard bind without `--allowed-hosts`).
    allowed: Option<Vec<String>>,
}

impl HostPolicy {
    /// A loopback bind serves the loopback names; a bind to one address serves that address; a
    /// wildcard bind serves any name unless `extra` lists them. `extra` may hold `*` for any.
    pub fn new(bind_host: &str, extra: &[String]) -> Self {
        let extra: Vec<String> = extra.iter().map(|h| normalize_host(h)).filter(|h| !h.is_empty()).collect();
        if extra.iter().any(|h| h == "*") {
            return Self { allowed: None };
        }
        let bind = normalize_host(bind_host);
        let bind_ip: Option<IpAddr> = bind.parse().ok();
        let mut allowed = extra;
        match bind_ip {
            Some(ip) if ip.is_unspecified() => {
                if allowed.is_empty() {
                    return Self { allowed: None };
                }
                allowed.extend(loopback_names());
            }
            Some(ip) if ip.is_loopback() => allowed.extend(loopback_names()),
            _ if bind == "localhost" => allowed.extend(loopback_names()),
            _ => allowed.push(bind),
        }
        Self { allowed: Some(allowed) }
    }

    pub fn allows(&self, host_header: &str) -> bool {
        match &self.allowed {
            None => true,
            Some(list) => {
                let host = normalize_host(strip_port(host_header));
                list.contains(&host)
            }
        }
    }
}

fn loopback_names() -> [String; 3] {
    ["localhost".into(), "127.0.0.1".into(), "::1".into()]
}

/// Lowercase, without brackets around an IPv6 address and without a trailing dot.
fn normalize_host(host: &str) -> String {
    let host = host.trim().trim_end_matches('.').to_ascii_lowercase();
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).map(str::to_owned).unwrap_or(host)
}

/// `name:port` → `name`, `[v6]:port` → `[v6]`; a bare IPv6 address is kept whole.
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority.find(']').map_or(authority, |end| &authority[..=end]);
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => authority,
    }
}

/// `scheme://authority` of an `Origin` header, with the scheme's default port made explicit.
fn origin_authority(origin: &str) -> Option<(String, String)> {
    let (scheme, rest) = origin.split_once("://")?;
    let authority = rest.trim_end_matches('/');
    if authority.is_empty() || authority.contains('/') {
        return None;
    }
    Some((scheme.to_ascii_lowercase(), with_default_port(&scheme.to_ascii_lowercase(), authority)))
}

fn with_default_port(scheme: &str, authority: &str) -> String {
    let authority = authority.to_ascii_lowercase();
    if strip_port(&authority).len() != authority.len() {
        return authority;
    }
    match scheme {
        "https" => format!("{authority}:443"),
        _ => format!("{authority}:80"),
    }
}

/// Refuses what another site could make a browser send. `Ok` for every request that does not
/// come from a browser page of another origin.
pub fn check(policy: &HostPolicy, req: &HttpRequest) -> Result<(), ApiError> {
    // The raw header, never `X-Forwarded-Host`: a rebinding page may set that one freely.
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()))
        .unwrap_or("");
    if !policy.allows(host) {
        return Err(ApiError::MisdirectedRequest(format!(
            "this server does not answer to the host name {:?}; add it with --allowed-hosts",
            strip_port(host)
        )));
    }
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let headers = req.headers();
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let own_scheme = if req.app_config().secure() { "https" } else { "http" };
        let same = origin_authority(origin).is_some_and(|(scheme, authority)| {
            scheme == own_scheme && authority == with_default_port(own_scheme, host)
        });
        if !same {
            return Err(ApiError::Forbidden {
                field: "Origin".into(),
                reason: format!("a page from {origin:?} may not change data on this server"),
            });
        }
        return Ok(());
    }
    match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        Some("cross-site" | "same-site") => Err(ApiError::Forbidden {
            field: "Sec-Fetch-Site".into(),
            reason: "a page from another site may not change data on this server".into(),
        }),
        _ => Ok(()),
    }
}

/// The path the router matches: percent-decoded once, but for `/`, `%` and `+`, which stay
/// encoded (actix's rule). Every decision on a path (which routes need a key, which answer in
/// MLflow's shape) reads this one, never `HttpRequest::path`, the raw one.
pub fn routed_path(req: &HttpRequest) -> &str {
    req.match_info().as_str()
}

/// Refuses a path that names a route only by a spelling the router would not match the same
/// way: dot segments and empty segments (`/api//v1`, `/api/v1/runs/../users`, also encoded, as
/// `%2e%2e` or inside `%2F..%2F`), NUL, and percent-encoding that is not UTF-8. Other control
/// characters are the routes' to refuse, naming their field.
pub fn check_path(req: &HttpRequest) -> Result<(), ApiError> {
    let refuse = |reason: &str| Err(ApiError::invalid("path", format!("{reason}: {:?}", req.uri().path())));
    let raw = req.uri().path();
    let Ok(decoded) = percent_encoding::percent_decode_str(raw).decode_utf8() else {
        return refuse("the path's percent-encoding is not UTF-8");
    };
    if decoded.contains('\0') {
        return refuse("the path holds a NUL character");
    }
    let query = percent_encoding::percent_decode_str(req.query_string());
    if query.clone().any(|b| b == 0) {
        return Err(ApiError::invalid("query", "the query string holds a NUL character (%00)"));
    }
    if query.decode_utf8().is_err() {
        return Err(ApiError::invalid("query", "the query string's percent-encoding is not UTF-8"));
    }
    for path in [routed_path(req), decoded.as_ref()] {
        let mut segments = path.split('/').skip(1).peekable();
        while let Some(segment) = segments.next() {
            if segment == "." || segment == ".." {
                return refuse("the path holds a dot segment");
            }
            if segment.is_empty() && segments.peek().is_some() {
                return refuse("the path holds an empty segment");
            }
        }
    }
    Ok(())
}

/// Middleware applying `check_path`, then `check`, before any route runs.
pub async fn guard(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let refused = match req.app_data::<web::Data<HostPolicy>>() {
        Some(policy) => check_path(req.request()).and_then(|()| check(policy, req.request())).err(),
        None => check_path(req.request()).err(),
    };
    if let Some(error) = refused {
        let response = error.error_response();
        return Ok(req.into_response(response).map_into_right_body());
    }
    Ok(next.call(req).await?.map_into_left_body())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn request(method: Method, host: &str, headers: &[(&str, &str)]) -> HttpRequest {
        let mut r = TestRequest::default().method(method).insert_header((header::HOST, host));
        for (k, v) in headers {
            r = r.insert_header((*k, *v));
        }
        r.to_http_request()
    }

    #[test]
    fn paths_the_router_would_read_otherwise_are_refused() {
        let at = |p: &str| check_path(&TestRequest::default().uri(p).to_http_request());
        for ok in [
            "/",
            "/api/v1/runs/r1",
            "/%61pi/v1/runs",
            "/api/v1/runs/r1/artifacts/a%20b.txt",
            "/api/v1/x/",
            "/ui/app.js",
        ] {
            assert!(at(ok).is_ok(), "{ok}");
        }
        for bad in [
            "/api//v1/projects",
            "//api/v1/projects",
            "/api/v1/runs/../users",
            "/api/v1/runs/%2e%2E/users",
            "/api/v1/runs/r1/artifacts/a%2F..%2Fb",
            "/api/v1/runs/./x",
            "/api/v1/runs/a%00b",
            "/api/v1/runs/%ff",
            "/api/v1/runs?filter=a%00b",
            "/api/v1/runs?filter=%c3",
        ] {
            let err = at(bad).expect_err(bad);
            let want = if bad.contains('?') { "query" } else { "path" };
            assert!(matches!(&err, ApiError::Invalid { field, .. } if field == want), "{bad}: {err:?}");
        }
    }

    #[test]
    fn a_loopback_bind_answers_loopback_names_and_the_allowed_hosts_only() {
        let policy = HostPolicy::new("127.0.0.1", &["tracker.lab".into()]);
        for host in ["127.0.0.1:7310", "localhost:7310", "LOCALHOST", "[::1]:7310", "tracker.lab:80", "tracker.lab."] {
            assert!(policy.allows(host), "{host}");
        }
        for host in ["evil.example", "evil.example:7310", "127.0.0.2:7310", "10.0.0.1", ""] {
            assert!(!policy.allows(host), "{host}");
        }
        assert!(HostPolicy::new("0.0.0.0", &[]).allows("anything.example"));
        assert!(!HostPolicy::new("0.0.0.0", &["a.lab".into()]).allows("b.lab"));
        assert!(HostPolicy::new("127.0.0.1", &["*".into()]).allows("b.lab"));
        assert!(HostPolicy::new("192.168.1.5", &[]).allows("192.168.1.5:7310"));
        assert!(!HostPolicy::new("192.168.1.5", &[]).allows("evil.example"));
    }

    #[test]
    fn state_changes_from_another_origin_are_refused() {
        let policy = HostPolicy::new("127.0.0.1", &[]);
        let ok = |m: Method, h: &[(&str, &str)]| check(&policy, &request(m, "127.0.0.1:7310", h)).is_ok();
        assert!(ok(Method::POST, &[]));
        assert!(ok(Method::POST, &[("origin", "http://127.0.0.1:7310")]));
        assert!(ok(Method::GET, &[("origin", "http://evil.example")]));
        assert!(ok(Method::POST, &[("sec-fetch-site", "same-origin")]));
        assert!(ok(Method::POST, &[("sec-fetch-site", "none")]));
        assert!(!ok(Method::POST, &[("origin", "http://evil.example")]));
        assert!(!ok(Method::PUT, &[("origin", "http://127.0.0.1:8000")]));
        assert!(!ok(Method::DELETE, &[("origin", "null")]));
        assert!(!ok(Method::PATCH, &[("origin", "https://127.0.0.1:7310")]));
        assert!(!ok(Method::POST, &[("sec-fetch-site", "same-site")]));
        assert!(!ok(Method::POST, &[("sec-fetch-site", "cross-site")]));
        let err = check(&policy, &request(Method::GET, "evil.example:7310", &[])).unwrap_err();
        assert!(matches!(err, ApiError::MisdirectedRequest(_)), "{err:?}");
        let default_port = HostPolicy::new("localhost", &[]);
        assert!(check(&default_port, &request(Method::POST, "localhost", &[("origin", "http://localhost")])).is_ok());
    }
}
