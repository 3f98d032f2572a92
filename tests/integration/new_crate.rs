//! `claimonce-local new`: the provider crate it writes, for each scheme it offers, is one the
//! registry reads, whose template renders, whose manifest resolves offline against the lock
//! it starts from, and whose sources are as `cargo fmt` leaves them. Building and testing the
//! crate takes minutes on a fresh target directory, so CI does it once, beside the examples
//! (`.ci/run`, "claimonce-local new"); this test checks everything short of the compiler.

use std::path::{Path, PathBuf};
use std::process::Command;

use claimonce_local::functions::workspace_root;
use claimonce_tests::lambda::binaries;

/// `claimonce-local new acme <dir> --scheme <scheme>` against this checkout: its output.
async fn new(dir: &Path, scheme: &str) -> std::process::Output {
    let local = binaries().await.join("claimonce-local");
    tokio::process::Command::new(local)
        .args(["new", "acme"])
        .arg(dir)
        .args(["--scheme", scheme, "--claimonce-path"])
        .arg(workspace_root())
        .output()
        .await
        .expect("claimonce-local new")
}

fn said(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

fn cargo(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(args)
        .current_dir(dir)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("cargo")
}

#[tokio::test]
async fn new_writes_a_provider_crate_the_registry_reads_and_the_template_renders() {
    let root = std::env::temp_dir().join(format!("claimonce-new-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for scheme in [
        "standard-webhooks",
        "timestamp-v1",
        "body-hmac-sha256",
        "own",
    ] {
        let dir: PathBuf = root.join(scheme);
        let output = new(&dir, scheme).await;
        assert!(output.status.success(), "{scheme}: {}", said(&output));
        assert!(said(&output).contains("cargo test"), "{}", said(&output));

        let providers = claimonce_local::registry::providers(&dir).expect("its registry");
        let [acme] = providers.as_slice() else {
            panic!("{scheme}: one provider: {providers:?}")
        };
        assert_eq!(acme.provider, "acme");
        assert_eq!(acme.binary, "acme-webhook");
        assert_eq!(
            acme.constructor.as_deref(),
            Some("acme_webhook::Acme::from_secret")
        );
        assert_eq!(acme.get("scheme"), Some(scheme));
        let mut jobs = vec!["acme-migrate", "acme-relay", "acme-sweep", "acme-webhook"];
        if scheme == "own" {
            jobs.push("acme-sign");
        }
        let mut bins = acme.binaries.clone();
        bins.sort();
        jobs.sort_unstable();
        assert_eq!(bins, jobs, "{scheme}: the binaries its template runs");
        assert_eq!(acme.migrations.len(), 1, "{scheme}");
        assert_eq!(acme.samples.len(), 2, "{scheme}");

        // A built-in scheme's samples are signed; a crate's own signs at the first send.
        let sample =
            std::fs::read_to_string(dir.join("events/acme/order.created.json")).expect("a sample");
        let event: serde_json::Value = serde_json::from_str(&sample).expect("JSON");
        let headers = event["headers"].as_object().expect("headers");
        let signed = headers.keys().any(|k| k.contains("signature"));
        assert_eq!(signed, scheme != "own", "{scheme}: {headers:?}");

        let rendered = tokio::process::Command::new(binaries().await.join("claimonce-local"))
            .arg("template")
            .env("CLAIMONCE_PROJECT", &dir)
            .output()
            .await
            .expect("template");
        assert!(rendered.status.success(), "{scheme}: {}", said(&rendered));
        let template = std::fs::read_to_string(dir.join("template.yaml")).expect("template.yaml");
        assert!(template.contains("acme-migrate"), "{scheme}");

        // The manifest resolves with no network: every dependency is in the lock it starts
        // from (claimonce's), at claimonce's versions.
        let metadata = cargo(&dir, &["metadata", "--offline", "--format-version", "1"]);
        assert!(metadata.status.success(), "{scheme}: {}", said(&metadata));
        for package in ["rustls", "tokio", "tokio-postgres"] {
            let theirs = locked(&workspace_root().join("Cargo.lock"), package);
            assert!(theirs.is_some(), "{package}");
            assert_eq!(
                locked(&dir.join("Cargo.lock"), package),
                theirs,
                "{package}"
            );
        }
        let fmt = cargo(&dir, &["fmt", "--check"]);
        assert!(fmt.status.success(), "{scheme}: {}", said(&fmt));
    }

    // Never over a crate that is there, and only a name that can be a provider's.
    let again = new(&root.join("own"), "own").await;
    assert!(!again.status.success());
    assert!(said(&again).contains("not empty"), "{}", said(&again));
    let wrong = new(&root.join("wrong"), "rot13").await;
    assert!(
        said(&wrong).contains("one of standard-webhooks"),
        "{}",
        said(&wrong)
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// The version the lock at `path` holds of `package`.
fn locked(path: &Path, package: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    lines.find(|l| *l == format!("name = \"{package}\""))?;
    lines.next().map(str::to_owned)
}
