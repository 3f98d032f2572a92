//! How the local run signs a sample for a scheme it does not know: a provider crate whose
//! scheme is its own ships a small signer binary (its registry entry names it, `signer = "…"`)
//! whose `main` is one call to [`serve`] with the scheme's constructor. Both sides of that
//! exchange are here, so they cannot drift apart:
//!
//! - the local run starts `<signer> <unix-time> <message-id>` with the local secret in
//!   [`SECRET_VAR`] (never on the command line) and the raw body on standard input;
//! - the signer prints one `name: value` line per header that signs the body, through the same
//!   [`Sign`] implementation the crate's tests use, and exits 0; the local run reads them back
//!   with [`read_headers`].
//!
//! ```no_run
//! # struct MySignature;
//! # impl claimonce::prelude::Sign for MySignature {
//! #     fn sign(&self, _: &[u8], _: u64, _: &str) -> Vec<(String, String)> { Vec::new() }
//! # }
//! # impl MySignature { fn new(_: &[&str]) -> Option<Self> { Some(Self) } }
//! // src/bin/my-sign.rs of a provider crate
//! fn main() -> std::process::ExitCode {
//!     claimonce::verify::signer_command::serve(|secret| MySignature::new(&[secret]))
//! }
//! ```

use std::io::{Read, Write};
use std::process::ExitCode;

use super::Sign;

/// The variable the signer reads its secret from.
pub const SECRET_VAR: &str = "CLAIMONCE_SIGN_SECRET";

/// A signer binary's whole `main`: `build` makes the scheme from the secret in [`SECRET_VAR`]
/// (`None` when the secret is not one the scheme takes), then the body read from standard
/// input is signed at the time and with the message id of the two arguments. What goes wrong
/// is said on standard error, without the secret.
pub fn serve<S: Sign>(build: impl FnOnce(&str) -> Option<S>) -> ExitCode {
    match sign_stdin(build) {
        Ok(lines) => {
            let mut out = std::io::stdout().lock();
            if out
                .write_all(lines.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("signer: {message}");
            ExitCode::FAILURE
        }
    }
}

fn sign_stdin<S: Sign>(build: impl FnOnce(&str) -> Option<S>) -> Result<String, String> {
    let mut args = std::env::args().skip(1);
    let (Some(now), Some(id), None) = (args.next(), args.next(), args.next()) else {
        return Err("usage: <signer> <unix-time> <message-id>, the body on standard input".into());
    };
    let now: u64 = now
        .parse()
        .map_err(|_| "the time is not a unix time in seconds".to_owned())?;
    let secret = std::env::var(SECRET_VAR).map_err(|_| format!("{SECRET_VAR} is not set"))?;
    let scheme =
        build(&secret).ok_or_else(|| format!("{SECRET_VAR} is not a secret the scheme takes"))?;
    let mut body = Vec::new();
    std::io::stdin()
        .read_to_end(&mut body)
        .map_err(|e| format!("standard input: {e}"))?;
    let mut lines = String::new();
    for (name, value) in scheme.sign(&body, now, &id) {
        if name.contains([':', '\n']) || value.contains('\n') {
            return Err("the scheme signed a header that cannot be written as one line".into());
        }
        lines.push_str(&name);
        lines.push_str(": ");
        lines.push_str(&value);
        lines.push('\n');
    }
    Ok(lines)
}

/// The headers a signer printed: one `name: value` per line, names lower-cased. Refuses an
/// empty answer (a scheme signs with at least one header) and a line without a name.
pub fn read_headers(output: &str) -> Result<Vec<(String, String)>, String> {
    let mut headers = Vec::new();
    for line in output.lines().filter(|l| !l.trim().is_empty()) {
        let (name, value) = line
            .split_once(':')
            .filter(|(name, _)| !name.trim().is_empty())
            .ok_or("the signer printed a line that is not `name: value`")?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    if headers.is_empty() {
        return Err("the signer printed no header".into());
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signer_s_lines_read_back_as_headers() {
        assert_eq!(
            read_headers("X-Own-Signature: ts=1;h1=ab\nx-two:  b \n\n"),
            Ok(vec![
                ("x-own-signature".into(), "ts=1;h1=ab".into()),
                ("x-two".into(), "b".into())
            ])
        );
        assert!(read_headers("").is_err());
        assert!(read_headers("no colon here").is_err());
        assert!(read_headers(": a value without a name").is_err());
    }
}
