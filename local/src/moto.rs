//! moto's server, a real emulator of AWS's SQS and Secrets Manager from PyPI: its pinned
//! version from `scripts/test-tools.txt`, installed by `scripts/test-tools` into a private
//! virtualenv the first time (which needs PyPI once), started on a free loopback port and
//! stopped, by the same watchdog as the private PostgreSQL, when the process that started it
//! ends however it ends. The tests' SQS and Secrets Manager, and the local run's spill queues;
//! localstripe, Stripe's API for the recover function's tests, is started the same way.

use std::time::Duration;

/// `http://127.0.0.1:<port>` of a moto server this process started: `scripts/moto_server.py`,
/// moto's server made to refuse what SQS refuses where moto would not (a message body with a
/// character SendMessage does not take).
pub async fn start() -> Result<String, String> {
    let script = crate::functions::workspace_root().join("scripts/moto_server.py");
    emulator(
        "python3",
        |port| {
            vec![
                script.to_string_lossy().into_owned(),
                "-H".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port,
            ]
        },
        &[],
    )
    .await
}

/// `http://127.0.0.1:<port>` of a localstripe this process started (a stateful emulator of
/// Stripe's API from PyPI, pinned beside moto): the recover function's tests read real event
/// objects from it. It saves its state to `/tmp/localstripe.pickle` whatever `TMPDIR` says
/// (and `--from-scratch` has it not read that back); the file goes when it stops.
pub async fn localstripe() -> Result<String, String> {
    emulator(
        "localstripe",
        |port| vec!["--port".into(), port, "--from-scratch".into()],
        &["/tmp/localstripe.pickle"],
    )
    .await
}

/// The bin directory of the pinned test tools (`scripts/test-tools.txt`: the emulators and
/// the AWS CLI), installed by `scripts/test-tools` into a private virtualenv the first time.
pub async fn tools_bin() -> Result<std::path::PathBuf, String> {
    let script = crate::functions::workspace_root().join("scripts/test-tools");
    // Its progress goes to this terminal: the first install (about 490 MB of emulators into
    // ~/.cache/claimonce, once) takes a minute or more, which would otherwise pass in silence.
    let tools = tokio::process::Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .map_err(|e| format!("{}: {e}", script.display()))?;
    if !tools.status.success() {
        return Err(format!(
            "scripts/test-tools (installs the emulators into a private virtualenv) failed with \
             {}: its output is above",
            tools.status
        ));
    }
    Ok(std::path::PathBuf::from(
        String::from_utf8_lossy(&tools.stdout).trim(),
    ))
}

/// Starts `program` of the pinned emulators (installed by `scripts/test-tools`) with the
/// arguments `args` makes of a free loopback port, and waits until it accepts a connection;
/// `leftovers` are files it writes outside its folder, removed when it stops.
async fn emulator(
    program: &str,
    args: impl Fn(String) -> Vec<String>,
    leftovers: &[&str],
) -> Result<String, String> {
    let bin = tools_bin().await?;
    let port = crate::postgres::free_loopback_port().map_err(|e| e.to_string())?;
    let dir =
        std::env::temp_dir().join(format!("claimonce-{program}-{}-{port}", std::process::id()));
    let log = dir.join("log");
    crate::postgres::supervise_as_self(
        &bin.join(program),
        &args(port.to_string()),
        &dir,
        leftovers,
    )
    .map_err(|e| format!("{program}: {e}"))?;
    // Up once it accepts a connection; bounded, so a server that never starts is an error.
    tokio::time::timeout(Duration::from_secs(60), async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .map_err(|_| format!("{program} did not listen on {port}; see {}", log.display()))?;
    Ok(format!("http://127.0.0.1:{port}"))
}

/// An SDK configuration for an endpoint on loopback (moto, or a test's stub): a fixed region
/// and the documentation's example credentials, which neither checks.
pub async fn aws_config_at(url: &str) -> aws_config::SdkConfig {
    claimonce::jobs::aws_config()
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(aws_credential_types::Credentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
            None,
            "test",
        ))
        .load()
        .await
}
