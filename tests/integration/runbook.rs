//! The AWS CLI commands of README.md, DEPLOY.md and OPERATIONS.md, read from the pages
//! themselves: each names only outputs and parameters the template has, and every `aws lambda
//! invoke` is written for CLI v2 (a `--payload` in raw JSON needs `--cli-binary-format
//! raw-in-base64-out`, or v2 answers "Invalid base64") and waits for a function that runs
//! minutes (`--cli-read-timeout 0`: the CLI's 60 s default would time out and invoke again, and
//! a second migrate run reports a spurious lock timeout while the first succeeds). And each
//! runs as written: against moto, and the function binaries behind Lambda's Invoke API.

use std::time::Duration;

use claimonce_tests::TestDb;

const PAGES: [(&str, &str); 3] = [
    ("README.md", include_str!("../../README.md")),
    ("DEPLOY.md", include_str!("../../DEPLOY.md")),
    ("OPERATIONS.md", include_str!("../../OPERATIONS.md")),
];
const TEMPLATE: &str = include_str!("../../template.yaml");
/// The quick start, whose outputs DEPLOY.md's quick start names.
const QUICKSTART: &str = include_str!("../../quickstart.yaml");

/// The `aws …` commands of a page, each on one line: a code block's continuation lines joined,
/// an inline code span taken to its closing backtick.
fn commands(page: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = page;
    while let Some(at) = rest.find("aws ") {
        let inline = rest[..at].ends_with('`');
        let tail = &rest[at..];
        let end = if inline {
            tail.find('`').unwrap_or(tail.len())
        } else {
            let mut end = 0;
            for line in tail.split_inclusive('\n') {
                end += line.len();
                if !line.trim_end().ends_with('\\') {
                    break;
                }
            }
            end
        };
        let command = tail[..end]
            .replace("\\\n", " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        // Only commands: a service name and an operation after `aws`.
        let words: Vec<&str> = command.split(' ').take(3).collect();
        if words.len() == 3
            && words
                .iter()
                .all(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        {
            found.push(command);
        }
        rest = &tail[end.max(4)..];
    }
    found
}

/// The `<…>` placeholders of a command, each as written between the brackets (`X output`) and
/// the name it stands for (`X`).
fn placeholders(command: &str) -> impl Iterator<Item = (&str, &str)> {
    command
        .split('<')
        .skip(1)
        .filter_map(|p| p.split_once('>'))
        .map(|(inner, _)| (inner, inner.trim_end_matches(" output")))
}

/// The top-level keys of one section of a template (`Parameters:`, `Outputs:`).
fn section_keys(template: &'static str, section: &str) -> Vec<&'static str> {
    let Some((_, body)) = template.split_once(&format!("\n{section}:\n")) else {
        panic!("the template has {section}");
    };
    body.lines()
        .take_while(|l| l.is_empty() || l.starts_with(' ') || l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.starts_with([' ', '#']))
        .filter_map(|l| l.strip_suffix(':'))
        .collect()
}

#[test]
fn every_aws_command_in_the_runbooks_names_what_the_template_has_and_runs_with_cli_v2() {
    let mut outputs = section_keys(TEMPLATE, "Outputs");
    outputs.extend(section_keys(QUICKSTART, "Outputs"));
    let parameters = section_keys(TEMPLATE, "Parameters");
    assert!(outputs.contains(&"MigrateFunctionName"), "{outputs:?}");
    assert!(parameters.contains(&"MigrateOnDeploy"), "{parameters:?}");
    let mut invokes = 0;
    let mut named = 0;
    for (name, page) in PAGES {
        for command in commands(page) {
            // `<X>` or `<X output>` where X is an output or a parameter; `<SpillQueueUrl
            // output>` stands for each provider's (`<Provider>SpillQueueUrl`).
            for (_, id) in placeholders(&command) {
                let is_name = id.chars().all(|c| c.is_ascii_alphanumeric())
                    && ["Name", "Url", "Arn", "Mapping", "Id"]
                        .iter()
                        .any(|s| id.ends_with(s));
                if !is_name {
                    continue;
                }
                named += 1;
                assert!(
                    outputs.iter().any(|o| *o == id || o.ends_with(id)) || parameters.contains(&id),
                    "{name}: `{command}` names <{id}>, which is no output or parameter of the templates"
                );
            }
            if command.starts_with("aws lambda invoke ") {
                invokes += 1;
                assert!(
                    command.contains("--cli-read-timeout 0"),
                    "{name}: `{command}` would give up after 60 s and invoke again"
                );
                if command.contains("--payload") {
                    assert!(
                        command.contains("--cli-binary-format raw-in-base64-out"),
                        "{name}: `{command}`: CLI v2 reads --payload as base64 without it"
                    );
                }
            }
        }
    }
    // The pages hold the migrate, sweep and recover invokes, and the queue and secret commands.
    assert!(invokes >= 4, "{invokes} aws lambda invoke commands found");
    assert!(named >= 8, "{named} named placeholders found");
}

/// The commands no emulator here can run, each with why; the CLI must still accept their
/// parameters (it reaches the emulator, which answers that it cannot).
const NEEDS_AN_ACCOUNT: [(&str, &str); 1] = [(
    "aws cloudformation continue-update-rollback",
    "moto does not roll a stack back, so it cannot continue a rollback",
)];

/// The stack made for a command that names one: a queue, and its URL as an output.
const STACK: &str = r#"{"Resources":{"Q":{"Type":"AWS::SQS::Queue"}},"Outputs":{"QueueUrl":{"Value":{"Ref":"Q"}}}}"#;

/// `command` with each placeholder that names something replaced by what `values` has for it
/// (a description inside quotes, `'<the whsec_ the provider gives…>'`, is text); `Err` naming
/// the first one it has nothing for.
fn fill(
    values: &std::collections::HashMap<String, String>,
    command: &str,
) -> Result<String, String> {
    let mut line = command.to_owned();
    for (inner, id) in placeholders(command) {
        match values.get(id) {
            Some(value) => line = line.replacen(&format!("<{inner}>"), value, 1),
            None if !id.chars().all(|c| c.is_ascii_alphanumeric()) => {}
            None => return Err(format!("<{inner}>")),
        }
    }
    Ok(line)
}

/// Runs `line` (a shell command line starting with `aws `) with the pinned AWS CLI against
/// `endpoint`, in `dir`: its status, stdout and stderr. Awaited, so the test's own servers (the
/// Invoke API, the functions' Runtime APIs) keep answering while it runs.
async fn run_aws(
    bin: &std::path::Path,
    endpoint: &str,
    dir: &std::path::Path,
    line: &str,
) -> (bool, String, String) {
    let line = line.replacen("aws ", &format!("aws --endpoint-url {endpoint} "), 1);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&line)
        .current_dir(dir)
        .env("PATH", path)
        .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        .env(
            "AWS_SECRET_ACCESS_KEY",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        )
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .output()
        .await
        .expect("sh");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).trim().to_owned(),
        String::from_utf8_lossy(&output.stderr).trim().to_owned(),
    )
}

/// Every `aws` command of README.md, DEPLOY.md and OPERATIONS.md runs as written with the AWS
/// CLI: the queue, secret, mapping, function, stack and database commands against moto, with
/// the resources their placeholders name made there first; `aws lambda invoke` against the
/// migrate, sweep and stripe-recover binaries behind Lambda's Invoke API, each answering
/// without an error. A command no emulator can run is listed in `NEEDS_AN_ACCOUNT`, and the CLI
/// still accepts its parameters. CLI v1 is PyPI's: its one difference the pages use,
/// `--cli-binary-format raw-in-base64-out` (v2's, held by the test above), is dropped.
#[tokio::test]
async fn every_aws_command_in_the_runbooks_runs_against_moto_and_the_functions() {
    use claimonce_tests::lambda::{LambdaApi, started};
    use claimonce_tests::senders::StripeApi;

    let moto = claimonce_tests::moto::moto().await.url.clone();
    let bin = claimonce_local::moto::tools_bin()
        .await
        .expect("the test tools");
    let dir = std::env::temp_dir().join(format!("claimonce-runbook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    std::fs::write(
        dir.join("app.private-key.pem"),
        "not a key: moto stores any text",
    )
    .expect("the .pem");
    let tag = format!(
        "{}{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let aws = async |args: &str| {
        let (ok, out, err) = run_aws(&bin, &moto, &dir, &format!("aws {args} --output text")).await;
        assert!(ok, "setup `aws {args}`: {err}");
        out
    };

    let mut values = std::collections::HashMap::new();
    for id in [
        "SpillQueueUrl",
        "SpillDeadLetterQueueUrl",
        "EventDeadLetterQueueUrl",
        "OutboxDeadLetterQueueUrl",
        "AsyncFailureQueueUrl",
    ] {
        let url = aws(&format!(
            "sqs create-queue --queue-name rb-{tag}-{id} --query QueueUrl"
        ))
        .await;
        values.insert(id.to_owned(), url);
    }
    // A message of the async-failure queue, received: its receipt handle is `<handle>`.
    aws(&format!(
        "sqs send-message --queue-url {} --message-body failed --query MessageId",
        values["AsyncFailureQueueUrl"]
    ))
    .await;
    let handle = aws(&format!(
        "sqs receive-message --queue-url {} --query Messages[0].ReceiptHandle",
        values["AsyncFailureQueueUrl"]
    ))
    .await;
    values.insert("handle".into(), handle);
    let role = aws(&format!(
        "iam create-role --role-name rb-{tag} --assume-role-policy-document {{}} --query Role.Arn"
    ))
    .await;
    let zip = dir.join("function.zip");
    // An empty zip archive (its end-of-central-directory record alone): moto keeps the code
    // and runs none of it here.
    let mut empty_zip = vec![0x50, 0x4b, 0x05, 0x06];
    empty_zip.extend([0_u8; 18]);
    std::fs::write(&zip, empty_zip).expect("the zip");
    aws(&format!(
        "lambda create-function --function-name rb-{tag} --runtime provided.al2023 \
         --handler bootstrap --role {role} --zip-file fileb://function.zip --query FunctionArn"
    ))
    .await;
    for (mapping, queue) in [
        ("SpillDrainMapping", "SpillQueueUrl"),
        ("SpillDeadLetterDrainMapping", "SpillDeadLetterQueueUrl"),
        ("EventDeadLetterDrainMapping", "EventDeadLetterQueueUrl"),
    ] {
        let arn = aws(&format!(
            "sqs get-queue-attributes --queue-url {} --attribute-names QueueArn \
             --query Attributes.QueueArn",
            values[queue]
        ))
        .await;
        let uuid = aws(&format!(
            "lambda create-event-source-mapping --function-name rb-{tag} \
             --event-source-arn {arn} --query UUID"
        ))
        .await;
        values.insert(mapping.to_owned(), uuid);
    }
    let secret = aws(&format!(
        "secretsmanager create-secret --name rb-{tag} --secret-string whsec_placeholder --query ARN"
    ))
    .await;
    for id in ["arn", "StripeWebhookSecretArn"] {
        values.insert(id.to_owned(), secret.clone());
    }
    values.insert("name".into(), format!("rb-{tag}"));
    let cluster = format!("rb-{tag}");
    aws(&format!(
        "rds create-db-cluster --db-cluster-identifier {cluster} --engine aurora-postgresql \
         --master-username claimonce --master-user-password placeholder-1 \
         --deletion-protection --query DBCluster.DBClusterIdentifier"
    ))
    .await;
    // The final snapshot a rolled-back first deploy may leave, which DEPLOY deletes by name.
    let snapshot = aws(&format!(
        "rds create-db-cluster-snapshot --db-cluster-identifier {cluster} \
         --db-cluster-snapshot-identifier rb-{tag}-final \
         --query DBClusterSnapshot.DBClusterSnapshotIdentifier"
    ))
    .await;
    values.insert("snapshot".into(), snapshot);
    values.insert("DbClusterId".into(), cluster);

    // The functions the invokes name, each under its own Runtime API emulator.
    let db = TestDb::new().await;
    let url = db
        .direct_url(
            "the runbook's functions run as deployed; the pooler adds nothing to a CLI check",
        )
        .to_owned();
    let stripe = StripeApi::start("rk_test_runbook", 100, None).await;
    let (migrate, _m) = started("migrate", &[("DATABASE_URL", &url)]).await;
    let (sweep, _s) = started("retention-sweep", &[("DATABASE_URL", &url)]).await;
    let (recover, _r) = started(
        "stripe-recover",
        &[
            ("DATABASE_URL", &url),
            ("STRIPE_API_BASE", &stripe.url),
            ("STRIPE_API_KEY", "rk_test_runbook"),
        ],
    )
    .await;
    let functions = LambdaApi::start(
        vec![
            ("migrate".into(), migrate),
            ("retention-sweep".into(), sweep),
            ("stripe-recover".into(), recover),
        ],
        Duration::from_secs(60),
    )
    .await;
    for (id, name) in [
        ("MigrateFunctionName", "migrate"),
        ("SweepFunctionName", "retention-sweep"),
        ("StripeRecoverFunctionName", "stripe-recover"),
    ] {
        values.insert(id.to_owned(), name.to_owned());
    }

    let mut ran = Vec::new();
    let mut invokes = 0;
    let mut stacks = 0;
    for (page, text) in PAGES {
        for command in commands(text) {
            // A mention of an operation (`aws lambda update-function-configuration` with any
            // change) names no parameters to run.
            if !command.contains(" --") {
                continue;
            }
            // `wait stack-delete-complete` waits on the stack the delete before it removed;
            // every other command that names a stack gets one of its own.
            if command.contains("<stack>") && !command.starts_with("aws cloudformation wait ") {
                stacks += 1;
                let stack = format!("rb-{tag}-stack-{stacks}");
                aws(&format!(
                    "cloudformation create-stack --stack-name {stack} --template-body '{STACK}' \
                     --query StackId"
                ))
                .await;
                values.insert("stack".into(), stack);
            }
            let line = fill(&values, &command).unwrap_or_else(|missing| {
                panic!("{page}: `{command}`: nothing stands for {missing}")
            });
            let invoke = line.starts_with("aws lambda invoke ");
            let endpoint = if invoke {
                invokes += 1;
                functions.url.as_str()
            } else {
                moto.as_str()
            };
            let line = line.replace(" --cli-binary-format raw-in-base64-out", "");
            let (ok, out, err) = run_aws(&bin, endpoint, &dir, &line).await;
            match NEEDS_AN_ACCOUNT
                .iter()
                .find(|(prefix, _)| command.starts_with(prefix))
            {
                Some((_, why)) => {
                    for refusal in [
                        "Unknown options",
                        "usage:",
                        "Parameter validation failed",
                        "Invalid choice",
                    ] {
                        assert!(
                            !err.contains(refusal),
                            "{page}: `{command}` ({why}): the CLI refused it: {err}"
                        );
                    }
                }
                None => assert!(ok, "{page}: `{line}` failed: {err}\n{out}"),
            }
            ran.push(command);
        }
    }
    let answers = functions.answers();
    assert_eq!(
        answers.len(),
        invokes,
        "every invoke reached its function: {answers:?}"
    );
    for (name, answer) in &answers {
        let answer = answer
            .as_ref()
            .unwrap_or_else(|e| panic!("{name} answered an error: {e}"));
        let expected = match name.as_str() {
            "migrate" => "latest",
            _ => "finished",
        };
        assert!(answer.get(expected).is_some(), "{name}: {answer}");
    }
    for name in ["migrate", "retention-sweep", "stripe-recover"] {
        assert!(
            answers.iter().any(|(n, _)| n == name),
            "no runbook command invoked {name}"
        );
    }
    // Every family of the pages ran: secrets, queues, mappings, stacks, the database, invokes.
    for family in [
        "aws secretsmanager ",
        "aws sqs ",
        "aws lambda update-event-source-mapping ",
        "aws lambda invoke ",
        "aws cloudformation ",
        "aws rds ",
    ] {
        assert!(
            ran.iter().any(|c| c.starts_with(family)),
            "no `{family}` command ran: {ran:?}"
        );
    }
    assert!(ran.len() >= 25, "{} commands ran: {ran:?}", ran.len());
    let _ = std::fs::remove_dir_all(&dir);
}
