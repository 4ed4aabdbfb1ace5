//! A small blocking HTTP layer over the server's API that turns answers into `Error`s.

use crate::{Error, Result};
use serde_json::Value;
use std::time::Duration;

/// The API key for a server run with `--auth`: `TRAINLOG_API_KEY`, else the one `trainlog login`
/// saved for that server in the credentials file.
pub fn api_key_for(server: &str) -> Option<String> {
    env_api_key().or_else(|| crate::credentials::load().remove(server.trim_end_matches('/')))
}

fn env_api_key() -> Option<String> {
    std::env::var("TRAINLOG_API_KEY").ok().map(|k| k.trim().to_owned()).filter(|k| !k.is_empty())
}

/// Whether a failed request failed on the server's certificate, which no retry will fix.
fn is_certificate_error(error: &reqwest::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(error);
    while let Some(e) = source {
        let text = e.to_string();
        if text.contains("certificate") || text.contains("UnknownIssuer") || text.contains("NotValidForName") {
            return true;
        }
        source = e.source();
    }
    false
}

/// A plain HTTP client for `server` that trusts what the SDK trusts and sends the key it would
/// send, for commands that speak another API of the same server (the MLflow routes).
pub fn client_for(server: &str, timeout: Duration) -> Result<reqwest::blocking::Client> {
    build_client(timeout, api_key_for(server).as_deref())
}

fn build_client(timeout: Duration, key: Option<&str>) -> Result<reqwest::blocking::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = key {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| Error::Invalid("the API key holds characters a header cannot carry".into()))?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    let client = reqwest::blocking::Client::builder()
        .tls_backend_preconfigured(crate::tls::client_config()?)
        .default_headers(headers)
        .timeout(timeout)
        .connect_timeout(Duration::from_secs(3))
        .build()
        .map_err(|e| Error::Invalid(format!("could not build an HTTP client: {e}")))?;
    Ok(client)
}

#[derive(Clone)]
pub struct Http {
    pub base: String,
    client: reqwest::blocking::Client,
}

impl Http {
    pub fn new(base: &str, timeout: Duration) -> Result<Self> {
        Self::with_key(base, timeout, api_key_for(base).as_deref())
    }

    /// A client that sends `key` (none: no key), whatever the environment holds.
    pub fn with_key(base: &str, timeout: Duration, key: Option<&str>) -> Result<Self> {
        Ok(Self { base: base.to_owned(), client: build_client(timeout, key)? })
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/v1{}", self.base, path)
    }

    /// A request that got no answer; a certificate this machine does not trust is not a network
    /// problem that a retry would fix.
    fn unreachable(&self, error: reqwest::Error) -> Error {
        if is_certificate_error(&error) {
            return Error::Invalid(format!(
                "{} presented a certificate this machine does not trust ({}); name its CA bundle in SSL_CERT_FILE",
                self.base,
                error_chain(&error)
            ));
        }
        Error::Unreachable { url: self.base.clone(), reason: error.to_string(), retry_after: None }
    }

    fn answer(&self, result: reqwest::Result<reqwest::blocking::Response>) -> Result<Value> {
        let text = self.answer_text(result)?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// A successful answer's body as it came; an unsuccessful one's as the error it names.
    fn answer_text(&self, result: reqwest::Result<reqwest::blocking::Response>) -> Result<String> {
        let response = result.map_err(|e| {
            // A request that cannot even be built (a malformed URL) never will be: not a network problem.
            if e.is_builder() {
                Error::Invalid(format!("the request could not be built: {e}"))
            } else {
                self.unreachable(e)
            }
        })?;
        let status = response.status().as_u16();
        let retry_after = retry_after(response.headers());
        let text = response.text().map_err(|e| self.unreachable(e))?;
        if (200..300).contains(&status) {
            return Ok(text);
        }
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        // Overload, a full disk and outages are not the request's fault: it is sent again later
        // (503 and 507 come with `Retry-After`).
        if is_transient(status) {
            return Err(Error::Unreachable {
                url: self.base.clone(),
                reason: format!("HTTP {status}: {body}"),
                retry_after,
            });
        }
        let e = &body["error"];
        let mut message = e["message"].as_str().map(str::to_owned).unwrap_or_else(|| body.to_string());
        if status == 401 {
            message += match api_key_for(&self.base) {
                Some(_) => {
                    " (the API key was refused: revoked, mistyped, or for another server; it came from \
                            TRAINLOG_API_KEY, else from `trainlog login`)"
                }
                None => " (this server needs an API key: set TRAINLOG_API_KEY, or run `trainlog login SERVER`)",
            };
        }
        Err(Error::Server {
            status,
            code: e["code"].as_str().unwrap_or("unknown").to_owned(),
            message,
            field: e["field"].as_str().map(str::to_owned),
        })
    }

    /// A GET's JSON body as text, for a caller that parses it itself.
    pub fn get_text(&self, path: &str) -> Result<String> {
        self.answer_text(self.client.get(self.url(path)).send())
    }

    pub fn get(&self, path: &str) -> Result<Value> {
        self.answer(self.client.get(self.url(path)).send())
    }

    pub fn post(&self, path: &str, body: &Value) -> Result<Value> {
        self.answer(self.client.post(self.url(path)).json(body).send())
    }

    pub fn post_bytes(&self, path: &str, content_type: &str, body: Vec<u8>) -> Result<Value> {
        self.answer(self.client.post(self.url(path)).header("content-type", content_type).body(body).send())
    }

    pub fn put_bytes(&self, path: &str, content_type: &str, body: Vec<u8>) -> Result<Value> {
        self.answer(self.client.put(self.url(path)).header("content-type", content_type).body(body).send())
    }

    /// Streams a local file as the body of a PUT.
    pub fn put_file(&self, path: &str, file: &std::path::Path) -> Result<Value> {
        let f = std::fs::File::open(file).map_err(crate::io_err(format!("opening {}", file.display())))?;
        let len = f.metadata().map_err(crate::io_err(format!("reading {}", file.display())))?.len();
        let body = reqwest::blocking::Body::sized(f, len);
        self.answer(
            self.client.put(self.url(path)).header("content-type", "application/octet-stream").body(body).send(),
        )
    }

    /// A GET whose body the caller streams; errors are turned into `Error`s first.
    pub fn get_stream(&self, path: &str) -> Result<reqwest::blocking::Response> {
        let response = self.client.get(self.url(path)).send().map_err(|e| self.unreachable(e))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let result: Result<reqwest::blocking::Response> = Err(match self.answer(Ok(response)) {
            Err(e) => e,
            Ok(v) => Error::Invalid(format!("unexpected answer {v}")),
        });
        result
    }

    pub fn delete(&self, path: &str) -> Result<Value> {
        self.answer(self.client.delete(self.url(path)).send())
    }

    pub fn patch(&self, path: &str, body: &Value) -> Result<Value> {
        self.answer(self.client.patch(self.url(path)).json(body).send())
    }

    pub fn put(&self, path: &str, body: &Value) -> Result<Value> {
        self.answer(self.client.put(self.url(path)).json(body).send())
    }
}

/// Statuses that say "not now" rather than "never": request timeout, too many requests, and
/// every server error (503 when the server's log or buffer cannot take a batch, 507 when its
/// disk is full).
pub(crate) fn is_transient(status: u16) -> bool {
    status >= 500 || status == 429 || status == 408
}

/// An HTTP error with every cause behind it, as one line.
pub fn error_chain(error: &reqwest::Error) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        parts.push(e.to_string());
        source = e.source();
    }
    parts.join(": ")
}

/// `Retry-After` in seconds; the HTTP-date form is left to the client's own backoff.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_and_failing_servers_are_transient_and_refusals_are_not() {
        for status in [408, 429, 500, 502, 503, 504, 507] {
            assert!(is_transient(status), "{status}");
        }
        for status in [400, 403, 404, 409, 413, 415, 421, 422] {
            assert!(!is_transient(status), "{status}");
        }
    }

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(reqwest::header::RETRY_AFTER, " 7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(reqwest::header::RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }
}
