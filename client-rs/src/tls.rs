//! TLS for the SDK's requests. The platform's verifier checks server certificates against the
//! system's roots and the PEM bundles named by `SSL_CERT_FILE` and `REQUESTS_CA_BUNDLE`. Besides,
//! as OpenSSL (curl, Python's `requests`) does, a server certificate that is itself in one of
//! those bundles is trusted even when it calls itself a CA, which is what `openssl req -x509`
//! makes by default; its name and dates are still checked.

use crate::{Error, Result};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};
use std::sync::Arc;

/// Bundles of system roots where Linux distributions keep them, for when `SSL_CERT_FILE` makes
/// the platform's verifier read that file instead.
const SYSTEM_BUNDLES: [&str; 3] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// The certificates in the PEM bundles named by `SSL_CERT_FILE` and `REQUESTS_CA_BUNDLE`.
fn named_certificates() -> Result<Vec<CertificateDer<'static>>> {
    let mut named = Vec::new();
    for var in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"] {
        let Some(path) = std::env::var(var).ok().filter(|v| !v.trim().is_empty()) else { continue };
        let pem = std::fs::read(&path)
            .map_err(|e| Error::Invalid(format!("{var} names {path}, which cannot be read: {e}")))?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Invalid(format!("{var} names {path}, which holds no PEM certificates: {e}")))?;
        if certs.is_empty() {
            return Err(Error::Invalid(format!("{var} names {path}, which holds no PEM certificates")));
        }
        named.extend(certs);
    }
    Ok(named)
}

/// The TLS configuration of the SDK's clients.
pub(crate) fn client_config() -> Result<rustls::ClientConfig> {
    let named = named_certificates()?;
    let mut roots = named.clone();
    // `SSL_CERT_FILE` replaces the system's roots for the platform's verifier: add them back.
    if !named.is_empty() {
        if let Some(pem) = SYSTEM_BUNDLES.iter().find_map(|p| std::fs::read(p).ok()) {
            roots.extend(CertificateDer::pem_slice_iter(&pem).filter_map(|c| c.ok()));
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let platform = rustls_platform_verifier::Verifier::new_with_extra_roots(roots, provider.clone())
        .map_err(|e| Error::Invalid(format!("the certificates this machine trusts cannot be loaded: {e}")))?;
    let verifier = TrustedByName { platform, named };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Invalid(format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    Ok(config)
}

/// The platform's verifier, and the certificates the user named, each trusted as itself.
#[derive(Debug)]
struct TrustedByName {
    platform: rustls_platform_verifier::Verifier,
    named: Vec<CertificateDer<'static>>,
}

/// Whether the verifier refused a certificate only because it says it is a CA. The verifier
/// checks a certificate's dates before that, and its name after.
fn refused_as_a_ca(error: &rustls::Error) -> bool {
    match error {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
            matches!(inner.downcast_ref::<webpki::Error>(), Some(webpki::Error::CaUsedAsEndEntity))
        }
        _ => false,
    }
}

impl ServerCertVerifier for TrustedByName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let refused = match self.platform.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Ok(verified) => return Ok(verified),
            Err(refused) => refused,
        };
        if refused_as_a_ca(&refused) && self.named.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_name(&parsed, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        Err(refused)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.platform.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.platform.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.platform.supported_verify_schemes()
    }
}
