//! Prints the provider registry of a project (the folder given, else the current one) as
//! JSON, for `scripts/template`: `{"providers": [{…}, …]}`, one object per provider crate in
//! name order, each with its `provider`, `package`, `description`, `folder` (relative to the
//! project), `binary`, `constructor`, `entry`, `deploy` and `samples` (objects of strings) and
//! `migrations` (their file names).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let root = std::env::args_os()
        .nth(1)
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    match claimonce_registry::providers(&root) {
        Ok(providers) => {
            println!("{}", json(&root, &providers));
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("the provider registry: {error}");
            ExitCode::FAILURE
        }
    }
}

fn json(root: &Path, providers: &[claimonce_registry::Provider]) -> String {
    let mut out = String::from("{\"providers\": [");
    for (i, p) in providers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let folder = p.folder.strip_prefix(root).unwrap_or(&p.folder);
        let migrations: Vec<(String, String)> = p
            .migrations
            .iter()
            .map(|m| {
                let file = m.path.file_name().map(|f| f.to_string_lossy().into_owned());
                (m.version.to_string(), file.unwrap_or_default())
            })
            .collect();
        out.push_str("\n  {");
        let fields: [(&str, String); 9] = [
            ("provider", string(&p.provider)),
            ("package", string(&p.package)),
            (
                "description",
                p.description.as_deref().map_or("null".into(), string),
            ),
            ("folder", string(&folder.to_string_lossy())),
            ("binary", string(&p.binary)),
            (
                "constructor",
                p.constructor.as_deref().map_or("null".into(), string),
            ),
            ("entry", object(&p.entry)),
            ("deploy", object(&p.deploy)),
            ("samples", object(&p.samples)),
        ];
        for (key, value) in fields {
            let _ = write!(out, "{}: {value}, ", string(key));
        }
        let _ = write!(out, "\"migrations\": {}}}", object(&migrations));
    }
    out.push_str("\n]}");
    out
}

fn object(pairs: &[(String, String)]) -> String {
    let fields: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}: {}", string(k), string(v)))
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// `text` as a JSON string.
fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
