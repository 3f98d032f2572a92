//! `claimonce-local new <sender>`: writes a team's provider crate, a minimal `examples/paddle`,
//! that passes its own tests and renders its template as written: the registry tables, a
//! `Provider` on the chosen scheme, one SQL effect and one Rust effect, a migration, signed
//! sample events, a test on the test kit ([`crate::kit`]) and the binaries the template runs.
//!
//! The claimonce crates are path dependencies on a checkout with their version beside the path
//! (none is published yet); once they are, the version alone is the dependency. The checkout's
//! `Cargo.lock` is the new crate's first lock, so it builds with the versions claimonce is
//! tested with, and a build that shares claimonce's target directory reuses what is built.
//!
//! The files are `local/scaffold/*.in`, with `{{key}}` placeholders.

use std::path::{Path, PathBuf};

use claimonce::prelude::Sign;
use claimonce::verify::body_hmac::{BodyHmac, Encoding};
use claimonce::verify::standard_webhooks::StandardWebhooks;
use claimonce::verify::timestamp_v1::TimestampV1;
use serde_json::json;

/// The schemes `new` writes a provider for: `--scheme`'s values (the usage says what each is).
pub const SCHEMES: [&str; 4] = [
    "standard-webhooks",
    "timestamp-v1",
    "body-hmac-sha256",
    "own",
];

/// The claimonce crates a provider crate depends on: the name its code uses, the package, and
/// its folder in a checkout.
const CRATES: [(&str, &str, &str); 7] = [
    ("claimonce", "claimonce", "shared"),
    (
        "claimonce-migrate",
        "claimonce-migrate",
        "functions/migrate",
    ),
    ("claimonce-migrations", "claimonce-migrations", "migrations"),
    (
        "retention-sweep",
        "claimonce-retention-sweep",
        "functions/retention-sweep",
    ),
    (
        "outbox-relay",
        "claimonce-outbox-relay",
        "functions/outbox-relay",
    ),
    ("claimonce-registry", "claimonce-registry", "registry"),
    ("claimonce-local", "claimonce-local", "local"),
];

/// What to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct New {
    /// The provider's name: the ledger namespace, the route, the role.
    pub provider: String,
    /// Where the crate goes (a folder that does not exist, or is empty).
    pub dir: PathBuf,
    /// One of [`SCHEMES`].
    pub scheme: String,
    /// The claimonce checkout the crate depends on.
    pub claimonce: PathBuf,
}

/// Every crate's files: each path under the crate, and its text, with `{{key}}` placeholders.
const FILES: [(&str, &str); 12] = [
    ("Cargo.toml", include_str!("../scaffold/Cargo.toml.in")),
    (".gitignore", include_str!("../scaffold/gitignore.in")),
    (
        ".cargo/config.toml",
        include_str!("../scaffold/cargo-config.toml.in"),
    ),
    ("build.rs", include_str!("../scaffold/build.rs.in")),
    ("clippy.toml", include_str!("../scaffold/clippy.toml.in")),
    ("src/lib.rs", include_str!("../scaffold/lib.rs.in")),
    ("src/main.rs", include_str!("../scaffold/main.rs.in")),
    (
        "src/bin/{{provider}}-migrate.rs",
        include_str!("../scaffold/migrate.rs.in"),
    ),
    (
        "src/bin/{{provider}}-sweep.rs",
        include_str!("../scaffold/sweep.rs.in"),
    ),
    (
        "src/bin/{{provider}}-relay.rs",
        include_str!("../scaffold/relay.rs.in"),
    ),
    (
        "migrations/V10000__{{provider}}.sql",
        include_str!("../scaffold/migration.sql.in"),
    ),
    (
        "tests/{{provider}}.rs",
        include_str!("../scaffold/test.rs.in"),
    ),
];

/// A crate's own scheme's files besides.
const OWN_FILES: [(&str, &str); 2] = [
    ("src/scheme.rs", include_str!("../scaffold/scheme.rs.in")),
    (
        "src/bin/{{provider}}-sign.rs",
        include_str!("../scaffold/sign.rs.in"),
    ),
];

/// The sample events' bodies: the SQL effect's and the Rust effect's.
const SAMPLES: [(&str, &str); 2] = [("order.created.json", "0001"), ("order.paid.json", "0002")];

/// The moment the samples are signed at, so that what `new` writes is the same each time; a
/// send signs again (`claimonce-local send`).
const SIGNED_AT: u64 = 1_796_050_800;

/// Writes the crate; the paths written, under `new.dir`.
pub fn write(new: &New) -> Result<Vec<PathBuf>, String> {
    if !claimonce_registry::is_name(&new.provider) {
        return Err(format!(
            "{:?}: a sender's name is lower-case letters and digits, starting with a letter \
             (it becomes the route /webhooks/<sender> and the role claimonce_<sender>)",
            new.provider
        ));
    }
    let scheme = SCHEMES
        .into_iter()
        .find(|name| *name == new.scheme)
        .ok_or_else(|| format!("--scheme {:?}: one of {}", new.scheme, SCHEMES.join(", ")))?;
    if std::fs::read_dir(&new.dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(format!(
            "{}: not empty; name a new folder",
            new.dir.display()
        ));
    }
    let keys = Keys::of(new, scheme)?;
    let p = &new.provider;
    let own: &[(&str, &str)] = if scheme == "own" { &OWN_FILES } else { &[] };
    let mut files: Vec<(String, String)> = FILES
        .iter()
        .chain(own)
        .map(|(path, text)| (keys.fill(path), keys.fill(text)))
        .collect();
    for (file, id) in SAMPLES {
        files.push((format!("events/{p}/{file}"), sample(new, &keys, file, id)?));
    }
    if let Ok(lock) = std::fs::read_to_string(new.claimonce.join("Cargo.lock")) {
        files.push(("Cargo.lock".into(), lock));
    }
    let mut written = Vec::new();
    for (file, text) in files {
        let path = new.dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path);
    }
    format(&written)?;
    Ok(written)
}

/// Formats the Rust files as `cargo fmt` would: a line's length, and where the crate's own
/// imports sort, depend on the sender's name.
fn format(written: &[PathBuf]) -> Result<(), String> {
    let sources: Vec<&PathBuf> = written
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    let status = std::process::Command::new("rustfmt")
        .args(["--edition", "2024"])
        .args(sources)
        .status();
    match status {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("rustfmt on the crate's sources: {status}")),
        Err(e) => Err(format!(
            "rustfmt: {e} (the crate is written; `rustup component add rustfmt`, then `cargo \
             fmt` in it)"
        )),
    }
}

/// What `new` prints: the files written, and the commands that come next.
pub fn report(new: &New, written: &[PathBuf]) -> String {
    let dir = new.dir.display();
    let mut text = format!("wrote {dir}:\n");
    for path in written {
        let shown = path.strip_prefix(&new.dir).unwrap_or(path);
        text.push_str(&format!("  {}\n", shown.display()));
    }
    let root = std::fs::canonicalize(&new.claimonce).unwrap_or_else(|_| new.claimonce.clone());
    let target = root.join("target");
    text.push_str(&format!(
        "next, in {dir}:\n  \
         CARGO_TARGET_DIR={} cargo test     # beside claimonce's build: its dependencies are reused\n  \
         claimonce-local template           # template.yaml and quickstart.yaml\n  \
         sam validate --lint -t template.yaml\n  \
         CLAIMONCE_PROJECT=$PWD claimonce-local   # serves POST /webhooks/{}\n",
        target.display(),
        new.provider
    ));
    if new.scheme == "own" {
        text.push_str(
            "The samples are signed at their first send (or claimonce-local sign), through the \
             crate's signer binary.\n",
        );
    }
    text
}

/// The placeholders' values.
#[derive(Debug)]
struct Keys(Vec<(String, String)>);

impl Keys {
    fn of(new: &New, scheme: &str) -> Result<Self, String> {
        let p = new.provider.as_str();
        let mut name = p.to_owned();
        if let Some(first) = name.get_mut(..1) {
            first.make_ascii_uppercase();
        }
        let package = format!("{p}-webhook");
        let own = scheme == "own";
        let (entry, doc, items, signature_new) = scheme_parts(scheme);
        let mut keys = vec![
            ("provider", p.to_owned()),
            ("PROVIDER", p.to_ascii_uppercase()),
            ("Name", name),
            ("crate", package.replace('-', "_")),
            ("package", package),
            ("dev_secret", dev_secret(p, scheme)),
            ("another_secret", dev_secret(&format!("{p}another"), scheme)),
            ("scheme_entry", entry.to_owned()),
            ("scheme_doc", doc.to_owned()),
            ("scheme_items", items.to_owned()),
            ("signature_new", signature_new.to_owned()),
            (
                "scheme_module",
                if own { OWN_MODULE } else { "" }.to_owned(),
            ),
            ("signer_bin", if own { OWN_SIGNER } else { "" }.to_owned()),
        ];
        let root = std::fs::canonicalize(&new.claimonce)
            .map_err(|e| format!("{}: {e}", new.claimonce.display()))?;
        for (key, package, folder) in CRATES {
            keys.push((key, dependency(&root, key, package, folder)?));
        }
        Ok(Self(
            keys.into_iter()
                .map(|(k, v)| (format!("{{{{{k}}}}}"), v))
                .collect(),
        ))
    }

    /// `template` with every key replaced by its value; twice, as a scheme's parts hold keys
    /// of their own.
    fn fill(&self, template: &str) -> String {
        let once = |text: String| {
            self.0
                .iter()
                .fold(text, |text, (key, value)| text.replace(key, value))
        };
        once(once(template.to_owned()))
    }

    fn get(&self, key: &str) -> &str {
        let key = format!("{{{{{key}}}}}");
        self.0
            .iter()
            .find(|(k, _)| *k == key)
            .map_or("", |(_, v)| v.as_str())
    }
}

/// The scheme of a crate's own: its module.
const OWN_MODULE: &str = "\npub mod scheme;\n";

/// The scheme of a crate's own: its signer's binary, which the local run signs samples with.
const OWN_SIGNER: &str = "\n# Signs a sample for the local run with the scheme of src/scheme.rs \
                          (never deployed).\n[[bin]]\nname = \"{{provider}}-sign\"\n\
                          path = \"src/bin/{{provider}}-sign.rs\"\n";

/// The registry lines, the crate documentation's line, the items and the constructor of each
/// scheme (with `{{…}}` keys of their own).
fn scheme_parts(scheme: &str) -> (&'static str, &'static str, &'static str, &'static str) {
    match scheme {
        "standard-webhooks" => (
            "scheme = \"standard-webhooks\"\n",
            "Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`; secrets\n\
             //! `whsec_<base64>`), claimonce's `StandardWebhooks`.",
            "\n/// The signature scheme.\n\
             pub type Signature = claimonce::verify::standard_webhooks::StandardWebhooks;\n",
            "Signature::new(secrets, tolerance).ok()",
        ),
        "timestamp-v1" => (
            "scheme = \"timestamp-v1\"\nsignature_header = \"{{provider}}-signature\"\n",
            "`{{Name}}-Signature: t=<unix>,v1=<hex>`, the HMAC-SHA256 of `<t>.<raw body>`,\n\
             //! claimonce's `TimestampV1`.",
            "\n/// The header the sender signs in (lower case; also the registry's \
             `signature_header`).\n\
             pub const SIGNATURE_HEADER: &str = \"{{provider}}-signature\";\n\n\
             /// The signature scheme.\n\
             pub type Signature = claimonce::verify::timestamp_v1::TimestampV1;\n",
            "Signature::new(SIGNATURE_HEADER, secrets, tolerance)",
        ),
        "body-hmac-sha256" => (
            "scheme = \"body-hmac-sha256\"\nsignature_header = \"x-{{provider}}-signature\"\n\
             signature_prefix = \"sha256=\"\nsignature_encoding = \"hex\"\n",
            "`X-{{Name}}-Signature: sha256=<hex>`, the HMAC-SHA256 of the raw body alone,\n\
             //! claimonce's `BodyHmac`. No time is signed, so no tolerance applies.",
            "\n/// The header the sender signs in (lower case; also the registry's \
             `signature_header`).\n\
             pub const SIGNATURE_HEADER: &str = \"x-{{provider}}-signature\";\n\n\
             /// The signature scheme.\n\
             pub type Signature = claimonce::verify::body_hmac::BodyHmac;\n",
            "// The body alone is signed: no time to hold to a tolerance.\n    \
             let _ = tolerance;\n    \
             let hex = claimonce::verify::body_hmac::Encoding::LowerHex;\n    \
             Signature::new(SIGNATURE_HEADER, \"sha256=\", hex, secrets)",
        ),
        _ => (
            "scheme = \"own\"\nsigner = \"{{provider}}-sign\"\n",
            "this crate's own ([`scheme`]), a stub to make the sender's.",
            "\n/// The signature scheme, this crate's own.\n\
             pub type Signature = scheme::{{Name}}Signature;\n",
            "Signature::new(secrets, tolerance)",
        ),
    }
}

/// The local secret: a `whsec_` one for Standard Webhooks, which decodes it.
fn dev_secret(provider: &str, scheme: &str) -> String {
    use base64::Engine as _;
    let text = format!("{provider}_local_claimonce_secret");
    if scheme == "standard-webhooks" {
        format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(text)
        )
    } else {
        text
    }
}

/// `key = { version, path }` for the crate at `root/folder`, read from its manifest (with
/// `package` when the package's name is not `key`).
fn dependency(root: &Path, key: &str, package: &str, folder: &str) -> Result<String, String> {
    let manifest = root.join(folder).join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).map_err(|e| {
        format!(
            "{}: {e} (--claimonce-path names a claimonce checkout)",
            manifest.display()
        )
    })?;
    let name = claimonce_registry::value(&text, "package", "name");
    let version = claimonce_registry::value(&text, "package", "version");
    match (name, version) {
        (Some(name), Some(version)) if name == package => {
            let renamed = if key == package {
                String::new()
            } else {
                format!("package = \"{package}\", ")
            };
            Ok(format!(
                "{key} = {{ {renamed}version = \"{version}\", path = \"{}\" }}",
                root.join(folder).display()
            ))
        }
        _ => Err(format!(
            "{}: not the {package} crate (--claimonce-path names a claimonce checkout)",
            manifest.display()
        )),
    }
}

/// A sample event, an API Gateway (HTTP API) request, signed with the local secret at
/// [`SIGNED_AT`] by a built-in scheme; a crate's own scheme signs it at its first `send` (or
/// `claimonce-local sign`), through its signer binary.
fn sample(new: &New, keys: &Keys, file: &str, number: &str) -> Result<String, String> {
    let p = new.provider.as_str();
    let kind = file.trim_end_matches(".json");
    let body = json!({
        "id": format!("evt_{p}_{number}"),
        "type": kind,
        "created_at": "2026-12-01T10:00:00Z",
        "data": {"id": "ord_1001", "amount": 4200, "currency": "EUR"},
    })
    .to_string();
    let route = format!("/webhooks/{p}");
    let agent = keys.get("Name").to_owned();
    let mut headers = serde_json::Map::new();
    headers.insert("content-type".into(), json!("application/json"));
    headers.insert("user-agent".into(), json!(agent));
    let id = format!("msg_{p}_{number}");
    let secret = keys.get("dev_secret");
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let signer: Option<Box<dyn Sign>> = match new.scheme.as_str() {
        "standard-webhooks" => {
            headers.insert("webhook-id".into(), json!(id));
            Some(Box::new(
                StandardWebhooks::new(&[secret], 0).map_err(|e| e.to_string())?,
            ))
        }
        "timestamp-v1" => {
            TimestampV1::new(leak(format!("{p}-signature")), &[secret], 0).map(|s| Box::new(s) as _)
        }
        "body-hmac-sha256" => BodyHmac::new(
            leak(format!("x-{p}-signature")),
            "sha256=",
            Encoding::LowerHex,
            &[secret],
        )
        .map(|s| Box::new(s) as _),
        _ => None,
    };
    if let Some(signer) = signer {
        for (name, value) in signer.sign(body.as_bytes(), SIGNED_AT, &id) {
            headers.insert(name, json!(value));
        }
    }
    let event = json!({
        "version": "2.0",
        "routeKey": format!("POST {route}"),
        "rawPath": route,
        "rawQueryString": "",
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "local.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "local",
            "http": {
                "method": "POST",
                "path": route,
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.10",
                "userAgent": agent,
            },
            "requestId": format!("local-{p}-{number}"),
            "routeKey": format!("POST {route}"),
            "stage": "$default",
            "time": "01/Dec/2026:10:00:00 +0000",
            "timeEpoch": SIGNED_AT * 1000,
        },
        "body": body,
        "isBase64Encoded": false,
    });
    let mut text = serde_json::to_string_pretty(&event).map_err(|e| e.to_string())?;
    text.push('\n');
    Ok(text)
}
