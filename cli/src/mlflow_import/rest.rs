//! A small blocking client of MLflow's REST API, used for both ends of an import: an MLflow
//! server, and trainlog's MLflow routes. Busy or failing answers are retried with backoff.

use super::{Error, Result};
use backon::{BlockingRetryable, ExponentialBuilder};
use serde_json::Value;
use std::io::Read;
use std::time::Duration;

pub struct Rest {
    pub base: String,
    client: reqwest::blocking::Client,
    credentials: Option<Credentials>,
    /// Requests sent, retries included.
    sent: std::sync::atomic::AtomicU64,
}

enum Credentials {
    Bearer(String),
    Basic(String, String),
}

/// A JSON text field as text (ids may come as numbers); empty when absent.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `[{key, value}]` as pairs.
pub fn pairs(v: &Value) -> Vec<(String, String)> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|t| (t["key"].as_str().unwrap_or_default().to_owned(), t["value"].as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// A metric value as MLflow writes it: a number, or "NaN", "Infinity", "-Infinity".
pub fn double_value(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            other => other.parse().ok(),
        },
        _ => None,
    }
}

pub fn double_json(v: f64) -> Value {
    if v.is_finite() {
        Value::from(v)
    } else if v.is_nan() {
        Value::from("NaN")
    } else if v > 0.0 {
        Value::from("Infinity")
    } else {
        Value::from("-Infinity")
    }
}

fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_max_times(8)
}

impl Rest {
    pub fn new(base: &str, client: reqwest::blocking::Client) -> Self {
        Self { base: base.trim_end_matches('/').to_owned(), client, credentials: None, sent: Default::default() }
    }

    /// How many requests this client has sent, retries included.
    pub fn requests_sent(&self) -> u64 {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A client for an MLflow server, with the credentials MLflow's own client reads
    /// (`MLFLOW_TRACKING_TOKEN`, else `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`).
    pub fn for_mlflow(base: &str) -> Result<Self> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let credentials = if let Some(token) = env("MLFLOW_TRACKING_TOKEN") {
            Some(Credentials::Bearer(token))
        } else if let (Some(user), Some(password)) = (env("MLFLOW_TRACKING_USERNAME"), env("MLFLOW_TRACKING_PASSWORD"))
        {
            Some(Credentials::Basic(user, password))
        } else {
            None
        };
        let client = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(300))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| Error::Source(format!("could not build an HTTP client: {e}")))?;
        Ok(Self { credentials, ..Self::new(base, client) })
    }

    fn request(&self, method: reqwest::Method, url: &url::Url) -> reqwest::blocking::RequestBuilder {
        self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let request = self.client.request(method, url.clone());
        match &self.credentials {
            None => request,
            Some(Credentials::Bearer(token)) => request.bearer_auth(token),
            Some(Credentials::Basic(user, password)) => request.basic_auth(user, Some(password)),
        }
    }

    /// `base` + a route, with each `/`-separated part of `path` percent-encoded.
    pub fn url(&self, route: &str, path: &str) -> Result<url::Url> {
        let mut url = url::Url::parse(&format!("{}{route}", self.base))
            .map_err(|e| Error::Source(format!("{}{route} is not a URL: {e}", self.base)))?;
        if !path.is_empty() {
            url.path_segments_mut()
                .map_err(|_| Error::Source(format!("{} cannot hold a path", self.base)))?
                .pop_if_empty()
                .extend(path.split('/'));
        }
        Ok(url)
    }

    fn answer(&self, url: &str, result: reqwest::Result<reqwest::blocking::Response>) -> Result<Value> {
        let response = self.checked(url, result)?;
        let text = response.text().map_err(|e| Error::Unreachable { url: url.to_owned(), reason: e.to_string() })?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    fn checked(
        &self,
        url: &str,
        result: reqwest::Result<reqwest::blocking::Response>,
    ) -> Result<reqwest::blocking::Response> {
        let response =
            result.map_err(|e| Error::Unreachable { url: url.to_owned(), reason: trainlog::error_chain(&e) })?;
        let status = response.status().as_u16();
        if response.status().is_success() {
            return Ok(response);
        }
        let text = response.text().unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
        let code = body["error_code"].as_str().or(body["error"]["code"].as_str()).unwrap_or("").to_owned();
        let message = body["message"].as_str().or(body["error"]["message"].as_str()).unwrap_or(&text).to_owned();
        Err(Error::Refused { url: url.to_owned(), status, code, message })
    }

    fn send(&self, build: impl Fn() -> reqwest::blocking::RequestBuilder, url: &str) -> Result<Value> {
        (|| self.answer(url, build().send())).retry(backoff()).when(Error::is_transient).call()
    }

    pub fn get(&self, route: &str, query: &[(&str, &str)]) -> Result<Value> {
        let mut url = self.url(route, "")?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        self.send(|| self.request(reqwest::Method::GET, &url), url.as_str())
    }

    pub fn post(&self, route: &str, body: &Value) -> Result<Value> {
        let url = self.url(route, "")?;
        self.send(|| self.request(reqwest::Method::POST, &url).json(body), url.as_str())
    }

    pub fn patch(&self, route: &str, body: &Value) -> Result<Value> {
        let url = self.url(route, "")?;
        self.send(|| self.request(reqwest::Method::PATCH, &url).json(body), url.as_str())
    }

    pub fn put(&self, route: &str, body: &Value) -> Result<Value> {
        let url = self.url(route, "")?;
        self.send(|| self.request(reqwest::Method::PUT, &url).json(body), url.as_str())
    }

    /// A GET whose body the caller streams: `route` then the encoded `path`.
    pub fn get_stream(&self, route: &str, path: &str) -> Result<reqwest::blocking::Response> {
        let url = self.url(route, path)?;
        (|| self.checked(url.as_str(), self.request(reqwest::Method::GET, &url).send()))
            .retry(backoff())
            .when(Error::is_transient)
            .call()
    }

    /// A PUT of a streamed body (not retried here: the caller opens the stream again).
    pub fn put_stream(&self, route: &str, path: &str, body: Box<dyn Read + Send>, len: Option<u64>) -> Result<Value> {
        let url = self.url(route, path)?;
        let body = match len {
            Some(len) => reqwest::blocking::Body::sized(body, len),
            None => reqwest::blocking::Body::new(body),
        };
        self.answer(
            url.as_str(),
            self.request(reqwest::Method::PUT, &url)
                .header("content-type", "application/octet-stream")
                .body(body)
                .send(),
        )
    }
}

/// Retries `f` while it fails for a reason that may pass (an outage, a busy server).
pub fn retried<T>(f: impl FnMut() -> Result<T>) -> Result<T> {
    f.retry(backoff()).when(Error::is_transient).call()
}
