//! TLS for the database connection: which `sslmode` values are accepted, the root
//! certificates trusted, and the rustls connector built from them.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::ConfigError;

/// Rewrites `sslmode` to a value tokio-postgres understands, and returns the mode we enforce.
pub(super) fn normalize_sslmode(url: &str) -> Result<(String, SslMode), ConfigError> {
    let Some(start) = url.find("sslmode=") else {
        return Ok((url.to_owned(), SslMode::Require));
    };
    let value_start = start + "sslmode=".len();
    let rest = url.get(value_start..).unwrap_or("");
    let len = rest
        .find(|c: char| c == '&' || c.is_whitespace())
        .unwrap_or(rest.len());
    let value = rest.get(..len).unwrap_or("");
    let mode = match value {
        "disable" => SslMode::Disable,
        "require" | "verify-ca" | "verify-full" => SslMode::Require,
        "prefer" | "allow" => {
            return Err(ConfigError::new(format!(
                "sslmode={value} may fall back to an unencrypted connection; use sslmode=require \
                 (verified TLS) or sslmode=disable (local development only)"
            )));
        }
        _ => return Err(ConfigError::new("sslmode has an unknown value".into())),
    };
    let replacement = if mode == SslMode::Disable {
        "disable"
    } else {
        "require"
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(url.get(..value_start).unwrap_or(""));
    out.push_str(replacement);
    out.push_str(rest.get(len..).unwrap_or(""));
    Ok((out, mode))
}

/// The certificates a verified connection trusts.
#[derive(Debug, Clone, Copy)]
pub enum Trust<'a> {
    /// The public web roots, which RDS Proxy's certificates (from ACM) chain to.
    WebRoots,
    /// A PEM bundle read from this path (`PGSSLROOTCERT`).
    PemFile(&'a Path),
    /// A PEM bundle carried in the binary, such as the Amazon RDS certificate bundle that a
    /// cluster's own endpoints chain to.
    Pem(&'a [u8]),
}

impl<'a> From<Option<&'a Path>> for Trust<'a> {
    fn from(path: Option<&'a Path>) -> Self {
        path.map_or(Trust::WebRoots, Trust::PemFile)
    }
}

/// A rustls connector that verifies the server's certificate chain and host name against
/// the roots `trust` names.
pub(super) fn tls_connector(trust: Trust<'_>) -> Result<MakeRustlsConnect, ConfigError> {
    let roots = match trust {
        Trust::WebRoots => {
            let mut roots = rustls::RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            roots
        }
        Trust::PemFile(path) => {
            pem_roots(CertificateDer::pem_file_iter(path).ok(), "PGSSLROOTCERT")?
        }
        Trust::Pem(pem) => pem_roots(
            Some(CertificateDer::pem_slice_iter(pem)),
            "the certificate bundle carried in this binary",
        )?,
    };
    // aws-lc-rs, the process's one provider (decision 0054): it offers the post-quantum hybrid
    // X25519MLKEM768 first, and the classical groups a server without it takes.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|_| ConfigError::new("TLS protocol versions unavailable".into()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The roots of a PEM bundle: at least one, each a certificate rustls takes; `what` names the
/// bundle in the error.
fn pem_roots<'c, E>(
    certs: Option<impl Iterator<Item = Result<CertificateDer<'c>, E>>>,
    what: &str,
) -> Result<rustls::RootCertStore, ConfigError> {
    let bad = || ConfigError::new(format!("{what} is not a readable PEM certificate bundle"));
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs.ok_or_else(bad)? {
        roots.add(cert.map_err(|_| bad())?).map_err(|_| bad())?;
    }
    if roots.is_empty() {
        return Err(bad());
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(url: &str) -> Result<(String, SslMode), ConfigError> {
        normalize_sslmode(url)
    }

    #[test]
    fn sslmode_defaults_to_verified_and_never_prefers() {
        assert_eq!(mode("postgres://h/db").map(|m| m.1), Ok(SslMode::Require));
        assert_eq!(
            mode("postgres://h/db?sslmode=verify-full&x=1"),
            Ok((
                "postgres://h/db?sslmode=require&x=1".into(),
                SslMode::Require
            ))
        );
        assert_eq!(
            mode("host=h sslmode=disable").map(|m| m.1),
            Ok(SslMode::Disable)
        );
        assert!(mode("postgres://h/db?sslmode=prefer").is_err());
        assert!(mode("postgres://h/db?sslmode=allow").is_err());
        assert!(mode("postgres://h/db?sslmode=bogus").is_err());
    }
}
