//! The user documents link to each other and to the tree: every relative link resolves to a
//! file that exists, and a link to a heading (`page.md#anchor`) to a heading of that page, so
//! a section moved or renamed fails here instead of leaving a reader at a dead link.

use std::path::{Path, PathBuf};

use claimonce_local::functions::workspace_root;

/// The user documents: the top-level pages, `docs/` and its decision records.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "DEPLOY.md", "OPERATIONS.md"]
        .into_iter()
        .chain(["RELIABILITY.md", "BENCHMARKS.md", "CONTRIBUTING.md"])
        .map(|p| root.join(p))
        .collect();
    for folder in ["docs", "docs/decisions"] {
        for entry in std::fs::read_dir(root.join(folder)).expect("a docs folder") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces as
/// `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The lines of `text` outside its fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut in_code = false;
    text.lines().filter(move |line| {
        if line.starts_with("```") {
            in_code = !in_code;
            return false;
        }
        !in_code
    })
}

fn anchors(text: &str) -> Vec<String> {
    prose(text)
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| anchor(heading.trim_start_matches('#')))
        .collect()
}

/// The `(target)` of every `[text](target)` outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            found.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    found
}

#[test]
fn every_link_in_the_documents_resolves() {
    let root = workspace_root();
    let mut checked = 0;
    for page in pages(&root) {
        let text = std::fs::read_to_string(&page).expect("a document");
        let dir = page.parent().expect("a folder");
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") {
                continue;
            }
            checked += 1;
            let (file, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                dir.join(file)
            };
            assert!(
                target.exists(),
                "{}: ({link}) names {}, which does not exist",
                page.display(),
                target.display()
            );
            if !fragment.is_empty() {
                let text = std::fs::read_to_string(&target).expect("the linked page");
                assert!(
                    anchors(&text).iter().any(|a| a == fragment),
                    "{}: ({link}) names a heading {} does not have",
                    page.display(),
                    target.display()
                );
            }
        }
    }
    assert!(checked >= 20, "{checked} relative links checked");
}

/// Every function of the repository's Rust sources (`fn <name>`), outside `target/`, with the
/// module it is in: its file's name, or its folder's for a `mod.rs`, `lib.rs` or `main.rs`.
fn function_names(root: &Path) -> Vec<(String, String)> {
    fn walk(dir: &Path, names: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let file = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !file.starts_with('.') && file != "target" {
                    walk(&path, names);
                }
            } else if let Some(stem) = file.strip_suffix(".rs") {
                let folder = |dir: &Path| {
                    dir.file_name()
                        .and_then(|n| n.to_str())
                        .unwrap_or("")
                        .replace('-', "_")
                };
                let mut modules = vec![match stem {
                    "mod" | "lib" | "main" => folder(dir),
                    _ => stem.to_owned(),
                }];
                // A crate's root is also named by its crate (`src/lib.rs` of
                // `functions/outbox-relay` is `outbox_relay`, of `functions/migrate`
                // `claimonce_migrate` too, its package's name).
                if matches!(stem, "lib" | "main") && modules[0] == "src" {
                    let krate = dir.parent().unwrap_or(dir);
                    modules.push(folder(krate));
                    let manifest =
                        std::fs::read_to_string(krate.join("Cargo.toml")).unwrap_or_default();
                    if let Some(package) = manifest
                        .lines()
                        .find_map(|l| l.strip_prefix("name = \""))
                        .and_then(|l| l.strip_suffix('"'))
                    {
                        modules.push(package.replace('-', "_"));
                    }
                }
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for piece in text.split("fn ").skip(1) {
                    let name: String = piece
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        for module in &modules {
                            names.push((module.clone(), name.clone()));
                        }
                    }
                }
            }
        }
    }
    let mut names = Vec::new();
    walk(root, &mut names);
    names
}

/// The tests a document cites: each backticked `path::name` whose last segment reads as a
/// test's sentence (four words or more in snake case), or is cut short with `…`; the module the
/// path names (its segment before the name), the name, and whether it was cut.
fn cited_tests(text: &str) -> Vec<(String, String, bool)> {
    let mut cited = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        if i % 2 == 0 || !span.contains("::") || span.contains(' ') {
            continue;
        }
        let mut segments = span.rsplit("::");
        let last = segments.next().unwrap_or("");
        // A unit test's module is the file its `mod tests` is in.
        let module = match segments.next().unwrap_or("") {
            "tests" => segments.next().unwrap_or(""),
            module => module,
        };
        let (name, cut) = match last.strip_suffix('…') {
            Some(name) => (name.trim_end_matches('_'), true),
            None => (last, false),
        };
        let snake = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if snake && (cut || name.matches('_').count() >= 3) {
            cited.push((module.to_owned(), name.to_owned(), cut));
        }
    }
    cited
}

/// Every test a document names exists, under that name (or, where the document cuts the name
/// short with `…`, a test whose name starts so) in the module the document names: a renamed,
/// moved or deleted test fails here instead of leaving a claim without its proof.
#[test]
fn every_test_a_document_names_exists() {
    let root = workspace_root();
    let names = function_names(&root);
    let mut checked = 0;
    let mut missing = Vec::new();
    for page in pages(&root) {
        let text = std::fs::read_to_string(&page).expect("a page");
        for (module, name, cut) in cited_tests(&text) {
            checked += 1;
            let found = names.iter().any(|(m, n)| {
                *m == module
                    && if cut {
                        n.starts_with(&name)
                    } else {
                        *n == name
                    }
            });
            if !found {
                missing.push(format!(
                    "{}: {module}::{name}{}",
                    page.strip_prefix(&root).unwrap_or(&page).display(),
                    if cut { "…" } else { "" }
                ));
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} test names found in the documents"
    );
    assert!(
        missing.is_empty(),
        "tests the documents name that do not exist: {missing:#?}"
    );
}

/// No user document cites an issue of a tracker that is not in the repository, or speaks of
/// "this machine": the documents say today's truth for whoever reads them.
#[test]
fn no_document_cites_an_issue_or_this_machine() {
    let root = workspace_root();
    let mut found = Vec::new();
    for page in pages(&root) {
        let text = std::fs::read_to_string(&page).expect("a page");
        for line in prose(&text) {
            let lower = line.to_lowercase();
            let issue = lower.match_indices("issue").any(|(at, _)| {
                let rest = lower[at + 5..].trim_start_matches(['s', ' ', '#']);
                rest.starts_with(|c: char| c.is_ascii_digit())
            });
            if issue || lower.contains("this machine") {
                found.push(format!(
                    "{}: {}",
                    page.strip_prefix(&root).unwrap_or(&page).display(),
                    line.trim()
                ));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// The folders and `.rs` files under `dir`, depth first.
fn source_tree(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            found.push(path.clone());
            source_tree(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// ARCHITECTURE.md's codemap is the tree as it is: every file of the shared crate is named in
/// it (a top-level one as `src/<file>`, one in a folder by its name), every `src/…` path it
/// names exists, and every crate folder of the workspace has its line.
#[test]
fn the_codemap_names_every_module_and_nothing_that_is_gone() {
    let root = workspace_root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let start = text
        .find("```\nshared/ ")
        .expect("the codemap block opens with shared/");
    let block = text[start + 3..]
        .split("```")
        .next()
        .expect("the codemap block");
    let src = root.join("shared/src");
    let mut all = Vec::new();
    source_tree(&src, &mut all);
    let mut unnamed = Vec::new();
    for path in &all {
        let relative = path.strip_prefix(&src).expect("under src");
        let name = relative
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a name");
        let named = if relative.parent() == Some(Path::new("")) {
            let suffix = if path.is_dir() { "/" } else { "" };
            block.contains(&format!("src/{name}{suffix}"))
        } else {
            ["lib.rs", "mod.rs"].contains(&name) || block.contains(name)
        };
        if !named && name != "lib.rs" {
            unnamed.push(relative.display().to_string());
        }
    }
    let gone: Vec<&str> = block
        .split(|c: char| c.is_whitespace() || "(),;`".contains(c))
        .filter_map(|word| word.strip_prefix("src/"))
        .filter(|path| !path.is_empty() && !src.join(path).exists())
        .collect();
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let members = claimonce_local::registry::array(&workspace, "workspace", "members");
    let crates: Vec<&str> = members
        .iter()
        .filter(|m| !m.ends_with("/*") && !block.contains(&format!("\n{m}/ ")))
        .copied()
        .collect();
    assert!(
        unnamed.is_empty() && gone.is_empty() && crates.is_empty(),
        "files the codemap does not name: {unnamed:?}; paths it names that are gone: {gone:?}; \
         crate folders without a line: {crates:?}"
    );
}

/// The names of the resources of `kind` (or, with `None`, the keys of `section`) of
/// template.yaml, with a provider's `Name` prefix written `<Provider>`, as the documents'
/// tables write them.
fn template_names(kind: Option<&str>) -> std::collections::BTreeSet<String> {
    template_keys(
        kind,
        if kind.is_some() {
            "Resources:"
        } else {
            "Outputs:"
        },
    )
}

fn template_keys(kind: Option<&str>, section: &str) -> std::collections::BTreeSet<String> {
    let root = workspace_root();
    let template = std::fs::read_to_string(root.join("template.yaml")).expect("template.yaml");
    let mut names = std::collections::BTreeSet::new();
    let mut inside = false;
    let mut current: Option<&str> = None;
    for line in template.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            inside = line == section;
            continue;
        }
        if !inside {
            continue;
        }
        if let Some(name) = line.strip_prefix("  ").and_then(|l| l.strip_suffix(':'))
            && !name.starts_with([' ', '#'])
        {
            current = Some(name);
            if kind.is_none() {
                names.insert(generic(name));
            }
        } else if let (Some(kind), Some(name)) = (kind, current)
            && line.trim() == format!("Type: {kind}")
        {
            names.insert(generic(name));
        }
    }
    names
}

/// `name` with a registered provider's template `Name` prefix written `<Provider>`.
fn generic(name: &str) -> String {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        claimonce_local::registry::providers(&workspace_root())
            .expect("the registry")
            .iter()
            .filter_map(|p| p.deploy("name").map(str::to_owned))
            .collect()
    });
    for provider in names {
        if let Some(rest) = name.strip_prefix(provider.as_str())
            && rest.starts_with(|c: char| c.is_ascii_uppercase())
        {
            return format!("<Provider>{rest}");
        }
    }
    name.to_owned()
}

/// The names in the first column of the table of `page` whose header row is `header`, made
/// generic as [`generic`] does.
fn table_names(page: &str, header: &str) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(workspace_root().join(page)).expect("a page");
    let at = text.find(header).expect("the table's header");
    text[at..]
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .filter_map(|line| line.split('|').nth(1))
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .map(generic)
        .collect()
}

/// DEPLOY.md's alarms and outputs are the template's: a table that a new alarm or output left
/// behind, or one that names something gone, fails here.
#[test]
fn deploy_s_alarms_and_outputs_are_the_template_s() {
    for (kind, header) in [
        (
            Some("AWS::CloudWatch::Alarm"),
            "| alarm | metric | fires when | missing data |",
        ),
        (None, "| output | what it is for |"),
    ] {
        let template = template_names(kind);
        let documented = table_names("DEPLOY.md", header);
        let missing: Vec<&String> = template.difference(&documented).collect();
        let gone: Vec<&String> = documented.difference(&template).collect();
        assert!(
            missing.is_empty() && gone.is_empty(),
            "DEPLOY.md's table {header}: not in it {missing:?}; not in the template {gone:?}"
        );
    }
}

/// Every parameter of template.yaml is named in DEPLOY.md (a provider's as `<Name>…` or
/// `Deploy<Name>`), so a parameter added to the template without a word on it fails here.
#[test]
fn deploy_names_every_parameter_of_the_template() {
    let text = std::fs::read_to_string(workspace_root().join("DEPLOY.md")).expect("DEPLOY.md");
    let named: std::collections::BTreeSet<String> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|code| code.split(|c: char| !(c.is_ascii_alphanumeric() || "<>".contains(c))))
        .map(|name| generic(&name.replace("<Name>", "<Provider>")))
        .collect();
    let parameters: Vec<String> = template_keys(None, "Parameters:")
        .into_iter()
        .filter(|p| !named.contains(p))
        .collect();
    assert!(
        parameters.is_empty(),
        "parameters DEPLOY.md does not name: {parameters:?}"
    );
}

/// OPERATIONS.md's list of metrics is what the code emits: every metric the functions write
/// (`name: "…"` of a metric, `count("…", …)` of a recovery run) is in it, and every name it
/// lists is one of them.
#[test]
fn operations_lists_every_metric_the_code_emits() {
    let root = workspace_root();
    let mut files = Vec::new();
    source_tree(&root.join("shared/src"), &mut files);
    for entry in std::fs::read_dir(root.join("functions")).expect("functions") {
        let src = entry.expect("an entry").path().join("src");
        if src.is_dir() {
            source_tree(&src, &mut files);
        }
    }
    files.retain(|f| f.is_file());
    let mut emitted = std::collections::BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        for marker in ["name: \"", "count(\""] {
            for piece in text.split(marker).skip(1) {
                let name = piece.split('"').next().unwrap_or_default();
                if name.starts_with(|c: char| c.is_ascii_uppercase())
                    && name.chars().all(|c| c.is_ascii_alphanumeric())
                {
                    emitted.insert(name.to_owned());
                }
            }
        }
    }
    let text = std::fs::read_to_string(root.join("OPERATIONS.md")).expect("OPERATIONS.md");
    let section = text
        .split("### The metrics")
        .nth(1)
        .and_then(|s| s.split("\n### ").next())
        .expect("OPERATIONS.md has \"The metrics\"");
    let listed: std::collections::BTreeSet<String> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| n.starts_with(|c: char| c.is_ascii_uppercase()))
        .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric()))
        .filter(|n| !["Provider", "Disposition", "Function"].contains(n))
        .map(str::to_owned)
        .collect();
    let unlisted: Vec<&String> = emitted.difference(&listed).collect();
    let gone: Vec<&String> = listed.difference(&emitted).collect();
    assert!(
        !emitted.is_empty() && unlisted.is_empty() && gone.is_empty(),
        "metrics OPERATIONS.md does not list: {unlisted:?}; listed but not emitted: {gone:?}"
    );
}

/// The set-aside count the documents state is the one deployed: template.yaml's
/// `OUTBOX_MAX_ATTEMPTS`, which is also the relay's default. Every mention of the variable in
/// the user documents gives it with the number that follows it.
#[test]
fn the_documents_state_the_outbox_set_aside_count_as_configured() {
    let root = workspace_root();
    let template = std::fs::read_to_string(root.join("template.yaml")).expect("template.yaml");
    let deployed: u32 = template
        .split("OUTBOX_MAX_ATTEMPTS: '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .and_then(|n| n.parse().ok())
        .expect("OUTBOX_MAX_ATTEMPTS in template.yaml");
    assert_eq!(outbox_relay::Options::default().max_attempts, deployed);
    let mut stated = 0;
    for page in ["RELIABILITY.md", "OPERATIONS.md", "docs/configuration.md"] {
        let text = std::fs::read_to_string(root.join(page)).expect("page");
        for (at, _) in text.match_indices("OUTBOX_MAX_ATTEMPTS") {
            let after = text.get(at..).unwrap_or_default();
            let number: String = after
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(char::is_ascii_digit)
                .collect();
            assert_eq!(
                number,
                deployed.to_string(),
                "{page}: `{}` states another count",
                after.chars().take(60).collect::<String>()
            );
            stated += 1;
        }
    }
    assert!(
        stated >= 3,
        "RELIABILITY, OPERATIONS and the configuration page each state it"
    );
}

/// DEPLOY's Managed Instances floor and break-even volumes are the arithmetic of the prices
/// decision 0047 cites (an m7g vCPU-hour, the 15% fee, classic Lambda's Arm duration at 256 MB),
/// for a receiver's 3 environments on the smallest instance Lambda may launch: 1 or 2 vCPUs,
/// since no AWS page names it, so DEPLOY gives both ends. A price, a size or a rounding changed
/// in the table and not in the arithmetic fails here.
#[test]
fn deploy_s_managed_instances_floor_is_the_cited_prices_at_both_instance_sizes() {
    const VCPU_HOUR: f64 = 0.0408;
    const FEE: f64 = 1.15;
    const HOURS: f64 = 730.0;
    const ENVIRONMENTS: f64 = 3.0;
    // 0.25 GB x $0.0000133334 per GB-second, per millisecond.
    const CLASSIC_MS: f64 = 0.25 * 0.000_013_333_4 / 1000.0;
    let month = |vcpus: f64| ENVIRONMENTS * vcpus * VCPU_HOUR * FEE * HOURS;
    // Two significant figures a second.
    let per_second = |dollars: f64, ms: f64| {
        let n = dollars / (CLASSIC_MS * ms) / (HOURS * 3600.0);
        let step = 10f64.powi(n.log10().floor() as i32 - 1);
        let rounded = ((n / step).round() * step) as u64;
        let text = rounded.to_string();
        match text.len() {
            4 | 5 => format!("{},{}", &text[..text.len() - 3], &text[text.len() - 3..]),
            _ => text,
        }
    };
    let deploy = std::fs::read_to_string(workspace_root().join("DEPLOY.md")).expect("DEPLOY.md");
    let (low, high) = (month(1.0), month(2.0));
    let floor = format!(
        "about ${:.0} a month on 1-vCPU instances (3 × m7g.medium), ${:.0} if Lambda's",
        low, high
    );
    assert!(
        deploy.replace('\n', " ").contains(&floor),
        "DEPLOY.md does not state the floor as {floor:?}"
    );
    for ms in [1.0, 5.0, 20.0] {
        let row = format!("| {ms} ms ");
        let line = deploy
            .lines()
            .find(|l| l.starts_with(&row))
            .unwrap_or_else(|| panic!("DEPLOY.md has no row {row:?}"));
        let volumes = format!(
            "about {} to {} a second",
            per_second(low, ms),
            per_second(high, ms)
        );
        assert!(
            line.contains(&volumes),
            "{row}: {volumes:?} is not in {line:?}"
        );
    }
}
