//! Sending alerts: a background task that posts each pending delivery to its channel (a signed
//! JSON webhook, Slack's or Discord's incoming-webhook body), records how it went, and tries a
//! failed one again with backoff. Deliveries live in the metadata store, so a restart loses
//! none. A channel's address is resolved and checked before each attempt, and the request goes
//! to the address checked: private, loopback and link-local ones only where a server admin
//! allowed the channel to reach them.

use crate::error::ApiError;
use crate::state::{meta, State};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::sync::Notify;
use trainlog_meta::alerts::{Attempt, DueDelivery};

static SENT: AtomicU64 = AtomicU64::new(0);
static FAILED_ATTEMPTS: AtomicU64 = AtomicU64::new(0);
static ROUND_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Deliveries sent, attempts that failed (each tried again until its last), and rounds that
/// could not read the store, since this server started.
pub(crate) fn counts() -> (u64, u64, u64) {
    (SENT.load(Ordering::Relaxed), FAILED_ATTEMPTS.load(Ordering::Relaxed), ROUND_FAILURES.load(Ordering::Relaxed))
}

/// How long resolving a channel's host may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// Deliveries one round sends.
const ROUND: i64 = 50;
/// The longest sleep between rounds when nothing wakes the task.
const IDLE: Duration = Duration::from_secs(5);
/// Characters of a receiver's answer kept with the delivery.
const ANSWER_CHARS: usize = 300;

fn waker() -> &'static Notify {
    static WAKE: OnceLock<Notify> = OnceLock::new();
    WAKE.get_or_init(Notify::new)
}

/// Tells the task a new alert waits to be sent.
pub(crate) fn wake() {
    waker().notify_one();
}

/// Whether `ip` is one a channel may reach only where a server admin allowed it.
pub(crate) fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || v6.to_ipv4_mapped().is_some_and(|v4| is_private(IpAddr::V4(v4)))
        }
    }
}

/// Checks a channel's address (`field` in errors): an http or https URL whose host resolves,
/// and only to public addresses unless `allow_private`. Answers the host and the addresses.
pub(crate) async fn check_target(
    field: &str,
    target: &str,
    allow_private: bool,
) -> Result<(String, Vec<SocketAddr>), ApiError> {
    if target.len() > 2_000 {
        return Err(ApiError::invalid(field, "at most 2,000 bytes"));
    }
    let url = url::Url::parse(target).map_err(|e| ApiError::invalid(field, format!("not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ApiError::invalid(field, "an http or https URL"));
    }
    let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| ApiError::invalid(field, "a URL with a host"))?;
    let bare = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let port = url.port_or_known_default().unwrap_or(443);
    let lookup =
        tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((bare.as_str(), port))).await.map_err(|_| {
            ApiError::invalid(field, format!("{host} did not resolve within {} s", RESOLVE_TIMEOUT.as_secs()))
        })?;
    let addrs: Vec<SocketAddr> =
        lookup.map_err(|e| ApiError::invalid(field, format!("{host} does not resolve: {e}")))?.collect();
    if addrs.is_empty() {
        return Err(ApiError::invalid(field, format!("{host} resolves to no address")));
    }
    if !allow_private {
        if let Some(private) = addrs.iter().find(|a| is_private(a.ip())) {
            return Err(ApiError::invalid(
                field,
                format!(
                    "{host} is {}, a private, loopback or link-local address; a server admin may allow it (allow_private)",
                    private.ip()
                ),
            ));
        }
    }
    Ok((bare, addrs))
}

/// Where the UI shows what an alert is about.
fn link(d: &DueDelivery, base: &str) -> String {
    match &d.alert.run_id {
        Some(run) => format!("{base}/#/run/{run}"),
        None => format!("{base}/#/p/{}", d.project),
    }
}

/// The body a channel of this kind is sent.
pub(crate) fn body(d: &DueDelivery, base: &str) -> Value {
    let a = &d.alert;
    let link = link(d, base);
    let about = match &a.run_id {
        Some(run) => format!("{} / {run}", d.project),
        None => d.project.clone(),
    };
    let level = a.level.to_uppercase();
    match d.channel.kind.as_str() {
        "slack" => {
            let text = format!("[{level}] *{}* ({about})\n{}\n<{link}|Open in trainlog>", a.title, a.text);
            json!({ "text": text })
        }
        "discord" => {
            let mut content = format!("[{level}] **{}** ({about})\n{}\n{link}", a.title, a.text);
            if content.chars().count() > 2_000 {
                content = content.chars().take(1_999).collect::<String>() + "…";
            }
            json!({ "content": content, "allowed_mentions": { "parse": [] } })
        }
        _ => json!({
            "project": d.project,
            "run": a.run_id,
            "rule": a.rule,
            "title": a.title,
            "text": a.text,
            "level": a.level,
            "step": a.step,
            "time": a.time_ms,
            "count": a.count,
            "url": link,
        }),
    }
}

/// `X-Trainlog-Signature` for `body` sent at `unix_s`: `t=<unix seconds>,v1=<hex of
/// HMAC-SHA256(secret, "t.body")>` (Stripe's scheme: the timestamp is signed, against replay).
pub fn signature(secret: &str, unix_s: i64, body: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, format!("{unix_s}.{body}").as_bytes());
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("t={unix_s},v1={hex}")
}

/// A mail's subject and text for an alert.
fn mail(d: &DueDelivery, base: &str) -> (String, String) {
    let a = &d.alert;
    let about = match &a.run_id {
        Some(run) => format!("{} / {run}", d.project),
        None => d.project.clone(),
    };
    let subject = format!("[trainlog] [{}] {} ({about})", a.level.to_uppercase(), a.title);
    let mut text = format!("{}\n\n{}\n", a.title, a.text);
    if !a.rule.is_empty() {
        text += &format!("\nRule: {}", a.rule);
    }
    if let Some(step) = a.step {
        text += &format!("\nStep: {step}");
    }
    if a.count > 1 {
        text += &format!("\nRaised {} times", a.count);
    }
    text += &format!("\nOpen in trainlog: {}\n", link(d, base));
    (subject, text)
}

async fn attempt(d: &DueDelivery, base: &str, mailer: Option<&crate::mail::Mailer>) -> Attempt {
    if d.channel.kind == "email" {
        let Some(mailer) = mailer else {
            return Attempt::Failed { answer: "this server sends no e-mail (no --smtp-url)".into() };
        };
        let to = d.channel.target.strip_prefix("mailto:").unwrap_or(&d.channel.target);
        let (subject, text) = mail(d, base);
        return match mailer.send(to, &subject, text).await {
            Ok(answer) => Attempt::Sent { answer },
            Err(answer) => Attempt::Failed { answer },
        };
    }
    let (host, addrs) = match check_target("url", &d.channel.target, d.channel.allow_private).await {
        Ok(found) => found,
        Err(e) => return Attempt::Failed { answer: e.to_string() },
    };
    let client = match reqwest::Client::builder()
        .timeout(ATTEMPT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .resolve_to_addrs(&host, &addrs)
        .user_agent(concat!("trainlog/", env!("CARGO_PKG_VERSION")))
        .build()
    {
        Ok(c) => c,
        Err(e) => return Attempt::Failed { answer: format!("no HTTP client: {e}") },
    };
    let text = body(d, base).to_string();
    let mut request = client
        .post(&d.channel.target)
        .header("Content-Type", "application/json")
        .header("X-Trainlog-Delivery", d.id.to_string());
    if let Some(secret) = d.secret.as_deref().filter(|s| !s.is_empty()) {
        request = request.header("X-Trainlog-Signature", signature(secret, trainlog_meta::now_ms() / 1000, &text));
    }
    match request.body(text).send().await {
        Ok(answer) => {
            let status = answer.status();
            let said: String = answer.text().await.unwrap_or_default().chars().take(ANSWER_CHARS).collect();
            let answer = format!(
                "HTTP {}{}",
                status.as_u16(),
                if said.is_empty() { String::new() } else { format!(": {said}") }
            );
            if status.is_success() {
                Attempt::Sent { answer }
            } else {
                Attempt::Failed { answer }
            }
        }
        Err(e) => Attempt::Failed { answer: format!("{e}") },
    }
}

/// Sends the deliveries due, for the server's whole life; `base` is the server's own URL, for links.
pub(crate) async fn run(state: State, base: String) {
    loop {
        let due = meta(&state, |m| m.due_deliveries(trainlog_meta::now_ms(), ROUND)).await;
        let mut sent_any = false;
        match due {
            Ok(due) => {
                for d in due {
                    sent_any = true;
                    let outcome = attempt(&d, &base, state.mailer.as_deref()).await;
                    match &outcome {
                        Attempt::Sent { .. } => SENT.fetch_add(1, Ordering::Relaxed),
                        Attempt::Failed { answer } => {
                            tracing::warn!("alert delivery {} to {} failed: {answer}", d.id, d.channel.target);
                            FAILED_ATTEMPTS.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                    if let Err(e) = meta(&state, move |m| m.record_attempt(d.id, &outcome)).await {
                        ROUND_FAILURES.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!("recording alert delivery {}: {e}", d.id);
                    }
                }
            }
            Err(e) => {
                ROUND_FAILURES.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("reading the alert deliveries due failed (tried again): {e}");
            }
        }
        if sent_any {
            continue;
        }
        let next = meta(&state, |m| m.next_delivery_ms()).await.ok().flatten();
        let wait = next.map_or(IDLE, |at| {
            Duration::from_millis((at - trainlog_meta::now_ms()).clamp(0, IDLE.as_millis() as i64) as u64)
        });
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = waker().notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_loopback_and_link_local_addresses_are_told_from_public_ones() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_private(private.parse().expect("ip")), "{private}");
        }
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "100.128.0.1"] {
            assert!(!is_private(public.parse().expect("ip")), "{public}");
        }
    }

    #[test]
    fn the_signature_is_stripes_scheme_over_the_timestamp_and_the_body() {
        // HMAC-SHA256("secret", "1700000000.{}"), computed independently with Python's hmac module.
        assert_eq!(
            signature("secret", 1_700_000_000, "{}"),
            "t=1700000000,v1=b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
        );
    }
}
