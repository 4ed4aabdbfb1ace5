//! Alerts by e-mail: the server's SMTP relay (`--smtp-url`), reached over STARTTLS (or
//! implicit TLS with `smtps://`), never in clear text, and the mail an alert becomes.

use lettre::message::{header::ContentType, Mailbox};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::path::PathBuf;
use std::time::Duration;

/// How the server sends mail, as configured.
#[derive(Debug, Clone)]
pub struct SmtpConfig {
    /// `smtp://[user@]host[:port]` (STARTTLS, port 587 by default) or `smtps://…` (TLS, 465).
    pub url: String,
    /// The sender's address.
    pub from: String,
    /// A PEM file of certificates to trust besides the system's (a private relay's CA).
    pub ca_file: Option<PathBuf>,
    /// The password of the URL's user.
    pub password: Option<String>,
}

/// A connection pool to the relay.
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailer").field("from", &self.from.to_string()).finish()
    }
}

impl Mailer {
    /// Checks the configuration and prepares the transport (no connection is made yet).
    pub fn new(config: &SmtpConfig) -> Result<Self, String> {
        let url = url::Url::parse(&config.url).map_err(|e| format!("--smtp-url {:?}: {e}", config.url))?;
        let implicit = match url.scheme() {
            "smtp" => false,
            "smtps" => true,
            other => return Err(format!("--smtp-url: smtp:// (STARTTLS) or smtps:// (TLS), not {other}://")),
        };
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or("--smtp-url names no host")?.to_owned();
        let mut tls = TlsParameters::builder(host.clone());
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path).map_err(|e| format!("--smtp-ca-file {}: {e}", path.display()))?;
            let cert = Certificate::from_pem(&pem).map_err(|e| format!("--smtp-ca-file {}: {e}", path.display()))?;
            tls = tls.add_root_certificate(cert);
        }
        let tls = tls.build().map_err(|e| format!("the SMTP relay's TLS settings: {e}"))?;
        let (mode, port) = if implicit { (Tls::Wrapper(tls), 465) } else { (Tls::Required(tls), 587) };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
            .port(url.port().unwrap_or(port))
            .tls(mode)
            .timeout(Some(Duration::from_secs(10)));
        if !url.username().is_empty() {
            let user = percent_decode(url.username());
            let password = config.password.clone().or_else(|| url.password().map(percent_decode)).unwrap_or_default();
            builder = builder.credentials(Credentials::new(user, password));
        }
        let from: Mailbox = config.from.parse().map_err(|e| format!("--smtp-from {:?}: {e}", config.from))?;
        Ok(Mailer { transport: builder.build(), from })
    }

    /// Sends one mail; the error says what the relay answered.
    pub async fn send(&self, to: &str, subject: &str, body: String) -> Result<String, String> {
        let to: Mailbox = to.parse().map_err(|e| format!("the address {to:?}: {e}"))?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(subject)
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| format!("building the mail: {e}"))?;
        match self.transport.send(message).await {
            Ok(answer) => Ok(format!("SMTP {}", answer.code())),
            Err(e) => Err(format!("SMTP: {e}")),
        }
    }
}

fn percent_decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text).decode_utf8_lossy().into_owned()
}

/// Whether `text` is an address a mail can be sent to (`name@example.com`).
pub fn is_address(text: &str) -> bool {
    text.len() <= 254 && text.parse::<lettre::Address>().is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_is_reached_over_tls_only_and_addresses_are_checked() {
        let config = |url: &str| SmtpConfig {
            url: url.into(),
            from: "trainlog <alerts@example.com>".into(),
            ca_file: None,
            password: None,
        };
        assert!(Mailer::new(&config("smtp://mail.example.com")).is_ok());
        assert!(Mailer::new(&config("smtps://bot@mail.example.com:465")).is_ok());
        let plain = Mailer::new(&config("http://mail.example.com")).expect_err("not smtp");
        assert!(plain.contains("smtp:// (STARTTLS) or smtps://"), "{plain}");
        assert!(Mailer::new(&SmtpConfig { from: "nobody".into(), ..config("smtp://mail.example.com") }).is_err());
        assert!(is_address("ana@example.com") && !is_address("ana") && !is_address("a b@example.com"));
    }
}
