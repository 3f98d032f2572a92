//! The AWS CLI commands of README.md, DEPLOY.md and OPERATIONS.md, read from the pages themselves: each
//! names only outputs and parameters the template has, and every `aws lambda invoke` runs as
//! written with CLI v2 (a `--payload` in raw JSON needs `--cli-binary-format
//! raw-in-base64-out`, or v2 answers "Invalid base64") and waits for a function that runs
//! minutes (`--cli-read-timeout 0`: the CLI's 60 s default would time out and invoke again, and
//! a second migrate run reports a spurious lock timeout while the first succeeds). Running
//! them needs an account; these checks are what can be held without one.

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
    let mut placeholders = 0;
    for (name, page) in PAGES {
        for command in commands(page) {
            // `<X>` or `<X output>` where X is an output or a parameter; `<SpillQueueUrl
            // output>` stands for each provider's (`<Provider>SpillQueueUrl`).
            for placeholder in command.split('<').skip(1).filter_map(|p| p.split_once('>')) {
                let id = placeholder.0.trim_end_matches(" output");
                let is_name = id.chars().all(|c| c.is_ascii_alphanumeric())
                    && ["Name", "Url", "Arn", "Mapping", "Id"]
                        .iter()
                        .any(|s| id.ends_with(s));
                if !is_name {
                    continue;
                }
                placeholders += 1;
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
    assert!(placeholders >= 8, "{placeholders} named placeholders found");
}
