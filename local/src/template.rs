//! Renders a project's SAM template (and, for this repository, the files derived from the same
//! registry) from `deploy/*.in` and `deploy/provider.yaml`, once per provider of the project's
//! registry: `claimonce-local template [--check]`.
//!
//! One renderer serves this repository and a team's repository that depends on claimonce by
//! git: the `deploy/` sources are read from the claimonce checkout this crate was built from
//! (`CARGO_MANIFEST_DIR/..`, which for a git dependency is cargo's checkout of it), and the
//! registry from the project (`CLAIMONCE_PROJECT`, else the current directory's workspace).
//! For this repository it writes `template.yaml`, `quickstart.yaml`, `events/sam-env.json`, the
//! fuzz crate's provider list and the documents' provider tables; for a team's project, its
//! `template.yaml` and the `quickstart.yaml` that nests it, whose receivers and jobs are the
//! project's own binaries
//! (docs/decisions/0046-a-teams-template-is-rendered-by-claimonce-local.md).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use claimonce_registry::Provider;

/// The claimonce checkout whose `deploy/` sources are rendered.
pub fn claimonce_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The project whose template is rendered: `CLAIMONCE_PROJECT`, else the workspace (or
/// package) of the current directory: the nearest folder at or above it whose `Cargo.toml`
/// has a `[workspace]` (a crate kept outside declares an empty one, so a checkout of it inside
/// another workspace is still its own project), else the nearest with a `Cargo.toml`.
pub fn project_from_env() -> Result<PathBuf, String> {
    if let Some(project) = claimonce::config::optional("CLAIMONCE_PROJECT") {
        return Ok(PathBuf::from(project));
    }
    let here = std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?;
    let mut nearest = None;
    for dir in here.ancestors() {
        let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        if claimonce_registry::lines(&text)
            .any(|line| line == claimonce_registry::Line::Table("workspace"))
        {
            return Ok(dir.to_path_buf());
        }
        nearest.get_or_insert_with(|| dir.to_path_buf());
    }
    nearest.ok_or_else(|| {
        format!(
            "{}: no Cargo.toml here or above (set CLAIMONCE_PROJECT to the project's folder)",
            here.display()
        )
    })
}

/// One provider's values for the `%%key%%` placeholders, and which optional parts it has.
#[derive(Debug)]
struct Values {
    text: BTreeMap<&'static str, Option<String>>,
    retention: bool,
    eventbridge: bool,
    api: bool,
    /// Its deploy table sets the receiver's bounds ([`DEADLINE_KEYS`]), fitted to the sender's
    /// answer window.
    deadline: bool,
    /// Where its registry entry is, for errors.
    manifest: String,
}

/// The deploy table's keys that fit a receiver's bounds to its sender's answer window (Slack's
/// 3 s against the 5 s default delivery deadline): all three or none, each a number of
/// milliseconds, set on the receiver as `DB_DELIVERY_TIMEOUT_MS`, `DB_CONNECT_TIMEOUT_MS` and
/// `SPILL_TIMEOUT_MS` (the `deadline-env` fragment of deploy/provider.yaml).
const DEADLINE_KEYS: [&str; 3] = [
    "delivery_timeout_ms",
    "connect_timeout_ms",
    "spill_timeout_ms",
];

/// The files a rendering writes: each path (under the project) and its text.
pub type Outputs = Vec<(PathBuf, String)>;

/// What is rendered for the project at `project`, from the `deploy/` sources of the claimonce
/// checkout at `claimonce`.
pub fn render(project: &Path, claimonce: &Path) -> Result<Outputs, String> {
    let providers = claimonce_registry::providers(project)?;
    if providers.is_empty() {
        return Err(format!(
            "{}: no crate of this project has a [package.metadata.claimonce] table",
            project.join("Cargo.toml").display()
        ));
    }
    let own = same_folder(project, claimonce);
    let values = providers
        .iter()
        .map(|p| values(project, p))
        .collect::<Result<Vec<_>, _>>()?;
    let deploy = Deploy::read(claimonce)?;
    let names: Vec<&str> = providers.iter().map(|p| p.provider.as_str()).collect();
    let jobs = if own {
        Jobs::claimonce()
    } else {
        Jobs::of(&providers)?
    };
    let mut outputs = vec![(
        project.join("template.yaml"),
        deploy.render("deploy/template.yaml.in", &values, &names, &jobs)?,
    )];
    outputs.push((
        project.join("quickstart.yaml"),
        deploy.render("deploy/quickstart.yaml.in", &values, &names, &jobs)?,
    ));
    if !own {
        return Ok(outputs);
    }
    outputs.push((
        project.join("events/sam-env.json"),
        sam_env(project, &values)?,
    ));
    outputs.push((
        project.join("fuzz/src/registered.rs"),
        fuzz_registered(&values),
    ));
    outputs.push((
        project.join("fuzz/Cargo.toml"),
        fuzz_manifest(project, &values)?,
    ));
    let blocks = deploy.doc_blocks(&values)?;
    for doc in DOCS {
        let path = project.join(doc);
        let text = read(&path)?;
        outputs.push((path, render_doc(doc, &text, &blocks)?));
    }
    Ok(outputs)
}

/// One line per provider of the project, in provider order: its name, its CloudFormation
/// prefix, its receiver binary and whether it is deployed by default (what scripts/sam-local,
/// scripts/check-template and .ci/run read).
pub fn list(project: &Path) -> Result<String, String> {
    let mut out = String::new();
    for p in claimonce_registry::providers(project)? {
        let v = values(project, &p)?;
        let _ = writeln!(
            out,
            "{} {} {} {}",
            p.provider,
            v.get("Name").unwrap_or_default(),
            p.binary,
            v.get("deployed").unwrap_or_default()
        );
    }
    Ok(out)
}

/// The documents with provider tables rendered from `deploy/docs.in`.
const DOCS: [&str; 4] = [
    "ARCHITECTURE.md",
    "DEPLOY.md",
    "docs/configuration.md",
    "docs/local.md",
];

/// Writes `outputs`, or with `check` only compares them: the paths (relative to `project`)
/// that differ.
pub fn write_or_check(
    project: &Path,
    outputs: &Outputs,
    check: bool,
) -> Result<Vec<String>, String> {
    let mut stale = Vec::new();
    for (path, text) in outputs {
        let current = std::fs::read_to_string(path).unwrap_or_default();
        if current != *text {
            stale.push(
                path.strip_prefix(project)
                    .unwrap_or(path)
                    .display()
                    .to_string(),
            );
            if !check {
                std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
    }
    Ok(stale)
}

fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The jobs' binaries (the template's `%%migrate%%`, `%%sweep%%` and `%%relay%%`).
#[derive(Debug, PartialEq, Eq)]
struct Jobs {
    migrate: String,
    sweep: String,
    relay: String,
}

impl Jobs {
    /// This repository's: its own job crates.
    fn claimonce() -> Self {
        Self {
            migrate: "migrate".into(),
            sweep: "retention-sweep".into(),
            relay: "outbox-relay".into(),
        }
    }

    /// A project outside claimonce's repository builds every function of its stack from its
    /// own workspace (cargo-lambda builds only a workspace's binaries), so each job is a
    /// `[[bin]]` of one of its provider crates named `<provider>-migrate`, `<provider>-sweep`
    /// and `<provider>-relay`: one of each in the project, since a stack has one migrations
    /// resource, one sweep and one relay.
    fn of(providers: &[Provider]) -> Result<Self, String> {
        let one = |job: &str| -> Result<String, String> {
            let found: Vec<String> = providers
                .iter()
                .flat_map(|p| {
                    let wanted = format!("{}-{job}", p.provider);
                    p.binaries.iter().filter(move |b| **b == wanted).cloned()
                })
                .collect();
            match <[String; 1]>::try_from(found) {
                Ok([binary]) => Ok(binary),
                Err(found) if found.is_empty() => Err(format!(
                    "{}: no [[bin]] named <provider>-{job}: the template's {job} function runs \
                     it (docs/providers.md, \"Deploy it\")",
                    providers
                        .iter()
                        .map(|p| p.folder.join("Cargo.toml").display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                Err(found) => Err(format!(
                    "{} are all <provider>-{job} binaries: a stack has one {job} function, so \
                     keep one",
                    found.join(", ")
                )),
            }
        };
        Ok(Self {
            migrate: one("migrate")?,
            sweep: one("sweep")?,
            relay: one("relay")?,
        })
    }
}

/// A provider's placeholder values, from its registry entry and its sample events.
fn values(project: &Path, p: &Provider) -> Result<Values, String> {
    let manifest = p.folder.join("Cargo.toml").display().to_string();
    let at = |what: String| format!("{manifest}: {what}");
    if p.deploy.is_empty() {
        return Err(at(
            "the registry entry needs a [package.metadata.claimonce.deploy] table".into(),
        ));
    }
    let constructor = p.constructor.clone().ok_or_else(|| {
        format!(
            "{}: its main is one claimonce::run_from_env(<crate>::<Type>::from_secret) call",
            p.folder.join("src/main.rs").display()
        )
    })?;
    let deploy_required = |key: &str| {
        p.deploy(key)
            .map(str::to_owned)
            .ok_or_else(|| at(format!("[package.metadata.claimonce.deploy] has no {key}")))
    };
    let entry_required = |key: &str| {
        p.get(key)
            .map(str::to_owned)
            .ok_or_else(|| at(format!("[package.metadata.claimonce] has no {key}")))
    };
    let label = deploy_required("label")?;
    let provider = p.provider.clone();
    let sample_rows = sample_rows(project, p, &manifest)?;
    let description = p.deploy("description").map_or_else(
        || format!("{label} webhook receiver (verify, claim, apply in one transaction)."),
        str::to_owned,
    );
    let deployed = if p.deploy("deployed") == Some("false") {
        "false"
    } else {
        "true"
    };
    let deadline = deadline(p).map_err(at)?;
    let folder = p
        .folder
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text: BTreeMap<&'static str, Option<String>> = [
        ("sample_rows", Some(sample_rows)),
        ("package", Some(p.package.clone())),
        ("folder", Some(folder)),
        ("summary", p.description.clone()),
        ("constructor", Some(constructor)),
        ("Name", Some(deploy_required("name")?)),
        ("PROVIDER", Some(provider.to_uppercase())),
        ("provider", Some(provider)),
        ("binary", Some(p.binary.clone())),
        ("SECRET_VAR", Some(entry_required("secret_var")?)),
        ("label", Some(label)),
        ("description", Some(description)),
        ("retries", Some(deploy_required("retries")?)),
        ("secret", Some(deploy_required("secret")?)),
        ("deployed", Some(deployed.to_owned())),
        ("retention", p.deploy("retention").map(str::to_owned)),
        (
            "retention_note",
            Some(p.deploy("retention_note").unwrap_or_default().to_owned()),
        ),
        ("dev_secret", Some(entry_required("dev_secret")?)),
        (
            "API_KEY_VAR",
            Some(p.get("api_key_var").unwrap_or_default().to_owned()),
        ),
    ]
    .into_iter()
    .chain(
        DEADLINE_KEYS
            .iter()
            .map(|key| (*key, p.deploy(key).map(str::to_owned))),
    )
    .collect();
    Ok(Values {
        text,
        retention: p.deploy("retention").is_some(),
        eventbridge: p.deploy("eventbridge") == Some("true"),
        // The provider completes events from its sender's API (claimonce::complete).
        api: p.get("api_key_var").is_some(),
        deadline,
        manifest,
    })
}

/// Whether the deploy table sets the receiver's bounds: all of [`DEADLINE_KEYS`], each a
/// whole number of milliseconds above zero, or none of them.
fn deadline(p: &Provider) -> Result<bool, String> {
    let set: Vec<&str> = DEADLINE_KEYS
        .iter()
        .copied()
        .filter(|key| p.deploy(key).is_some())
        .collect();
    if set.is_empty() {
        return Ok(false);
    }
    if let Some(missing) = DEADLINE_KEYS.iter().find(|key| !set.contains(key)) {
        return Err(format!(
            "[package.metadata.claimonce.deploy] sets {} but not {missing}: the three bounds \
             fit the sender's answer window together",
            set.join(", ")
        ));
    }
    for key in DEADLINE_KEYS {
        let value = p.deploy(key).unwrap_or_default();
        if value.is_empty()
            || !value.bytes().all(|b| b.is_ascii_digit())
            || value.bytes().all(|b| b == b'0')
        {
            return Err(format!(
                "[package.metadata.claimonce.deploy] {key} = {value:?}: a number of \
                 milliseconds above zero"
            ));
        }
    }
    Ok(true)
}

impl Values {
    fn get(&self, key: &str) -> Option<&str> {
        self.text.get(key).and_then(|v| v.as_deref())
    }

    fn provider(&self) -> &str {
        self.get("provider").unwrap_or_default()
    }
}

/// The `events/<provider>/` samples' table rows; every sample file has a line in the registry's
/// samples table, and every line a file.
fn sample_rows(project: &Path, p: &Provider, manifest: &str) -> Result<String, String> {
    let folder = project.join("events").join(&p.provider);
    let mut files = Vec::new();
    for sub in ["", "eventbridge"] {
        let dir = folder.join(sub);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") && entry.path().is_file() {
                files.push(if sub.is_empty() {
                    name
                } else {
                    format!("{sub}/{name}")
                });
            }
        }
    }
    files.sort();
    let samples: BTreeMap<&str, &str> = p
        .samples
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if let Some(missing) = files.iter().find(|f| !samples.contains_key(f.as_str())) {
        return Err(format!(
            "{manifest}: events/{}/{missing} has no line in [package.metadata.claimonce.samples]",
            p.provider
        ));
    }
    if let Some(gone) = samples.keys().find(|s| !files.iter().any(|f| f == *s)) {
        return Err(format!(
            "{manifest}: [package.metadata.claimonce.samples] names {gone}, which is not in \
             events/{}/",
            p.provider
        ));
    }
    let mut rows = Vec::new();
    for name in &files {
        let path = folder.join(name);
        let event: serde_json::Value =
            serde_json::from_str(&read(&path)?).map_err(|e| format!("{}: {e}", path.display()))?;
        let kind = if event.get("detail-type").is_some() {
            "EventBridge event"
        } else if event.get("version").and_then(|v| v.as_str()) == Some("2.0") {
            "HTTP API v2"
        } else {
            "REST API v1"
        };
        let does = samples.get(name.as_str()).copied().unwrap_or_default();
        rows.push(format!(
            "| `events/{}/{name}` | {kind}, {does} |",
            p.provider
        ));
    }
    Ok(rows.join("\n"))
}

/// `{marker: {name: text}}` for the `#@<marker> <name>` sections of `text`: each the lines up
/// to the next section, verbatim, without trailing empty lines. Lines before the first are
/// notes.
fn sections(text: &str, markers: &[&str]) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut found: BTreeMap<String, BTreeMap<String, Vec<&str>>> = markers
        .iter()
        .map(|m| ((*m).to_owned(), BTreeMap::new()))
        .collect();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some((marker, name)) = marker_line(line)
            && markers.contains(&marker)
            && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
            && !name.is_empty()
        {
            let by = found.entry(marker.to_owned()).or_default();
            by.entry(name.to_owned()).or_default();
            current = Some((marker.to_owned(), name.to_owned()));
        } else if let Some((marker, name)) = &current
            && let Some(lines) = found.get_mut(marker).and_then(|by| by.get_mut(name))
        {
            lines.push(line);
        }
    }
    found
        .into_iter()
        .map(|(m, by)| {
            let by = by
                .into_iter()
                .map(|(k, v)| (k, v.join("\n").trim_end_matches('\n').to_owned()))
                .collect();
            (m, by)
        })
        .collect()
}

/// `#@<word> <name>`: the word (lower-case letters and `-`) and the name.
fn marker_line(line: &str) -> Option<(&str, &str)> {
    let (word, name) = line.strip_prefix("#@")?.split_once(' ')?;
    let plain = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'-');
    (plain(word) && plain(name)).then_some((word, name))
}

/// The `deploy/` sources of a claimonce checkout.
struct Deploy {
    root: PathBuf,
    fragments: BTreeMap<String, String>,
}

impl Deploy {
    /// From the checkout's `deploy/`, else (a packaged copy of this crate, which has none
    /// around it) the copy this crate carries (`local/deploy` links to the checkout's).
    fn read(claimonce: &Path) -> Result<Self, String> {
        let claimonce = if claimonce.join("deploy/provider.yaml").is_file() {
            claimonce
        } else {
            Path::new(env!("CARGO_MANIFEST_DIR"))
        };
        let text = read(&claimonce.join("deploy/provider.yaml"))?;
        let fragments = sections(&text, &["fragment"])
            .remove("fragment")
            .unwrap_or_default();
        Ok(Self {
            root: claimonce.to_path_buf(),
            fragments,
        })
    }

    /// `source` rendered for the providers: each `#@each…` line expanded, each `#@with
    /// <provider>` … `#@end <provider>` part kept only when that provider is registered, and
    /// the whole registry's values filled in.
    fn render(
        &self,
        source: &str,
        providers: &[Values],
        names: &[&str],
        jobs: &Jobs,
    ) -> Result<String, String> {
        let text = read(&self.root.join(source))?;
        let text = with_providers(&text, providers, source)?;
        let text = self.expand(&text, &self.fragments, providers, source)?;
        let mut text = copied(&text, source)?;
        let labels: Vec<&str> = providers.iter().filter_map(|p| p.get("label")).collect();
        let deployed: Vec<&str> = providers
            .iter()
            .filter(|p| p.get("deployed") == Some("true"))
            .map(Values::provider)
            .collect();
        for (key, value) in [
            ("labels", labels.join(", ")),
            ("provider_names", names.join(", ")),
            ("deployed_providers", deployed.join(",")),
            ("migrate", jobs.migrate.clone()),
            ("sweep", jobs.sweep.clone()),
            ("relay", jobs.relay.clone()),
        ] {
            text = text.replace(&format!("%%{key}%%"), &value);
        }
        Ok(format!("{}\n", text.trim_end_matches('\n')))
    }

    /// `text` with each `#@each <fragment>` line (or `#@each-with-retention`,
    /// `#@each-with-eventbridge`, `#@each-without-eventbridge`, `#@each-with-api`) replaced by
    /// that fragment, once per provider it chooses.
    fn expand(
        &self,
        text: &str,
        parts: &BTreeMap<String, String>,
        providers: &[Values],
        source: &str,
    ) -> Result<String, String> {
        let mut out: Vec<String> = Vec::new();
        for line in text.lines() {
            let Some((kind, name)) = marker_line(line).filter(|(kind, _)| {
                *kind == "each"
                    || kind.starts_with("each-with-")
                    || kind.starts_with("each-without-")
            }) else {
                out.push(line.to_owned());
                continue;
            };
            let chooses: fn(&Values) -> bool = match kind {
                "each" => |_| true,
                "each-with-retention" => |p| p.retention,
                "each-with-eventbridge" => |p| p.eventbridge,
                "each-without-eventbridge" => |p| !p.eventbridge,
                "each-with-api" => |p| p.api,
                _ => return Err(format!("{source}: no #@{kind}")),
            };
            let fragment = parts
                .get(name)
                .ok_or_else(|| format!("{source}: no fragment {name}"))?;
            for p in providers.iter().filter(|p| chooses(p)) {
                out.push(self.fill(fragment, p)?);
            }
        }
        Ok(out.join("\n"))
    }

    /// `text` with every `%%key%%` replaced by the provider's value. A line that is only
    /// `%%?fragment%%` becomes that fragment of deploy/provider.yaml, filled and indented as
    /// the line, for a provider it applies to (`api-*` for one that completes events from its
    /// sender's API, `deadline-*` for one whose deploy table sets its bounds, the others for
    /// one that delivers through EventBridge), and nothing for the others.
    fn fill(&self, text: &str, p: &Values) -> Result<String, String> {
        let mut optional = String::new();
        let with_end = format!("{text}\n");
        for line in with_end.split_inclusive('\n') {
            let body = line.trim_end_matches('\n');
            let indent = body.len() - body.trim_start_matches(' ').len();
            let name = body
                .get(indent..)
                .and_then(|rest| rest.strip_prefix("%%?"))
                .and_then(|rest| rest.strip_suffix("%%"))
                .filter(|name| {
                    !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
                });
            let (Some(name), true) = (name, line.ends_with('\n')) else {
                optional.push_str(line);
                continue;
            };
            let wanted = if name.starts_with("api-") {
                p.api
            } else if name.starts_with("deadline-") {
                p.deadline
            } else {
                p.eventbridge
            };
            if !wanted {
                continue;
            }
            let fragment = self
                .fragments
                .get(name)
                .ok_or_else(|| format!("deploy/provider.yaml: no fragment {name}"))?;
            let pad = body.get(..indent).unwrap_or_default();
            for l in fragment.lines() {
                if !l.is_empty() {
                    optional.push_str(pad);
                }
                optional.push_str(l);
                optional.push('\n');
            }
        }
        let text = optional.trim_end_matches('\n');
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("%%") {
            let after = rest.get(start + 2..).unwrap_or_default();
            let key_len = after
                .bytes()
                .take_while(|b| b.is_ascii_alphabetic() || *b == b'_')
                .count();
            let key = after.get(..key_len).unwrap_or_default();
            if key_len == 0 || !after.get(key_len..).unwrap_or_default().starts_with("%%") {
                // Not a placeholder: keep the first `%` and look again after it.
                out.push_str(rest.get(..=start).unwrap_or_default());
                rest = rest.get(start + 1..).unwrap_or_default();
                continue;
            }
            let value = p.get(key).ok_or_else(|| {
                format!("deploy/: no value for %%{key}%% ({} has none)", p.manifest)
            })?;
            out.push_str(rest.get(..start).unwrap_or_default());
            out.push_str(value);
            rest = after.get(key_len + 2..).unwrap_or_default();
        }
        out.push_str(rest);
        Ok(out)
    }

    /// `{name: text}` for each `#@block` of deploy/docs.in, rendered for the registry.
    fn doc_blocks(&self, providers: &[Values]) -> Result<BTreeMap<String, String>, String> {
        let text = read(&self.root.join("deploy/docs.in"))?;
        let mut found = sections(&text, &["block", "fragment"]);
        let fragments = found.remove("fragment").unwrap_or_default();
        found
            .remove("block")
            .unwrap_or_default()
            .into_iter()
            .map(|(name, block)| {
                Ok((
                    name,
                    self.expand(&block, &fragments, providers, "deploy/docs.in")?,
                ))
            })
            .collect()
    }
}

/// `text` with each part between a `#@with <provider>...` line and the next `#@end` kept
/// (without the marker lines) when any provider it names is registered, and left out
/// otherwise: the parts of the shared template that serve senders of this repository (their
/// recover jobs), which a project without them must not carry. `#@with-some <feature>...`
/// does the same for the features a provider may have (`eventbridge`, `api`, `retention`):
/// kept when some provider has one of them (a parameter group that would be empty is left
/// out, which CloudFormation's interface metadata requires).
fn with_providers(text: &str, providers: &[Values], source: &str) -> Result<String, String> {
    let mut out: Vec<&str> = Vec::new();
    let mut open: Option<(usize, bool)> = None;
    for (number, line) in text.lines().enumerate() {
        let with = match (
            line.strip_prefix("#@with "),
            line.strip_prefix("#@with-some "),
        ) {
            (Some(names), _) => Some(
                names
                    .split(' ')
                    .any(|name| providers.iter().any(|p| p.provider() == name)),
            ),
            (_, Some(features)) => {
                let mut some = false;
                for feature in features.split(' ') {
                    let has: fn(&Values) -> bool = match feature {
                        "eventbridge" => |p| p.eventbridge,
                        "api" => |p| p.api,
                        "retention" => |p| p.retention,
                        _ => {
                            return Err(format!(
                                "{source}:{}: no feature {feature} (eventbridge, api, retention)",
                                number + 1
                            ));
                        }
                    };
                    some |= providers.iter().any(has);
                }
                Some(some)
            }
            _ => None,
        };
        match (with, line == "#@end", open) {
            (Some(_), _, Some((outer, _))) => {
                return Err(format!(
                    "{source}:{}: #@with inside the #@with of line {outer}",
                    number + 1
                ));
            }
            (Some(keep), _, None) => open = Some((number + 1, keep)),
            (None, true, Some(_)) => open = None,
            (None, true, None) => {
                return Err(format!("{source}:{}: #@end closes no #@with", number + 1));
            }
            (None, false, Some((_, false))) => {}
            (None, false, _) => out.push(line),
        }
    }
    if let Some((line, _)) = open {
        return Err(format!("{source}:{line}: #@with has no #@end"));
    }
    Ok(out.join("\n"))
}

/// `text` with each part between a `#@copy <name>` line and the next `#@end-copy` kept where it
/// is (without the marker lines), and each line that is only `%%=<name>%%` after its
/// indentation replaced by that part: its lines but comments and empty ones, indented as the
/// placeholder instead of as the part's first line. One text serves two places, so neither is
/// kept by hand: the migrate function's settings and the custom resource whose digest of them
/// names its version (docs/decisions/0055-the-migrate-function-s-version-names-its-settings.md).
/// Applied after the `#@each` lines are expanded, so a part holds their expansion.
fn copied(text: &str, source: &str) -> Result<String, String> {
    let mut parts: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut kept: Vec<&str> = Vec::new();
    let mut open: Option<(usize, &str)> = None;
    for (number, line) in text.lines().enumerate() {
        let at = || format!("{source}: the rendered text's line {}", number + 1);
        if let Some(name) = line.strip_prefix("#@copy ") {
            if let Some((outer, _)) = open {
                return Err(format!(
                    "{}: #@copy inside the #@copy of line {outer}",
                    at()
                ));
            }
            if parts.insert(name, Vec::new()).is_some() {
                return Err(format!("{}: a second #@copy {name}", at()));
            }
            open = Some((number + 1, name));
        } else if line == "#@end-copy" {
            if open.take().is_none() {
                return Err(format!("{}: #@end-copy closes no #@copy", at()));
            }
        } else {
            if let Some((_, name)) = open
                && let Some(part) = parts.get_mut(name)
            {
                part.push(line);
            }
            kept.push(line);
        }
    }
    if let Some((line, name)) = open {
        return Err(format!(
            "{source}: the #@copy {name} of the rendered text's line {line} has no #@end-copy"
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(kept.len());
    for line in kept {
        let body = line.trim_start_matches(' ');
        let Some(name) = body
            .strip_prefix("%%=")
            .and_then(|rest| rest.strip_suffix("%%"))
        else {
            out.push(line.to_owned());
            continue;
        };
        let part = parts
            .get(name)
            .ok_or_else(|| format!("{source}: %%={name}%% names no #@copy {name}"))?;
        let lines: Vec<&str> = part
            .iter()
            .copied()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .collect();
        let from = lines
            .first()
            .map_or(0, |l| l.len() - l.trim_start_matches(' ').len());
        let pad = line.get(..line.len() - body.len()).unwrap_or_default();
        let indent = " ".repeat(from);
        for l in lines {
            let rest = l.strip_prefix(indent.as_str()).ok_or_else(|| {
                format!("{source}: #@copy {name}: {l:?} is indented less than its first line")
            })?;
            out.push(format!("{pad}{rest}"));
        }
    }
    Ok(out.join("\n"))
}

/// The local PostgreSQL of `scripts/sam-local db`, as the containers reach it: the host, by the
/// name Docker Desktop gives it and samconfig.toml's add_host gives Docker Engine on Linux.
const LOCAL_DB: &str = "host.docker.internal:54329/claimonce?sslmode=disable";

/// events/sam-env.json: what `sam local` gives each function.
fn sam_env(project: &Path, providers: &[Values]) -> Result<String, String> {
    let mut objects: Vec<(String, Vec<(String, String)>)> = vec![(
        "Parameters".into(),
        vec![(
            "DATABASE_URL".into(),
            format!("postgres://postgres:claimonce-local@{LOCAL_DB}"),
        )],
    )];
    for p in providers {
        let provider = p.provider();
        let mut env = vec![
            (
                p.get("SECRET_VAR").unwrap_or_default().to_owned(),
                p.get("dev_secret").unwrap_or_default().to_owned(),
            ),
            (
                "DATABASE_URL".into(),
                format!("postgres://{provider}_webhook:claimonce-local@{LOCAL_DB}"),
            ),
        ];
        let dir = project.join("events").join(provider).join("eventbridge");
        let mut samples: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).collect())
            .unwrap_or_default();
        samples.retain(|s| s.extension().is_some_and(|x| x == "json"));
        samples.sort();
        if let (true, Some(first)) = (p.eventbridge, samples.first()) {
            // The partner source its EventBridge samples name and an event queue in the
            // samples' account (`sam local` declares these variables whatever <Name>EventBusName
            // says). The containers reach no SQS, so no record is proven to have come off it:
            // the SAM check shows each refused (scripts/sam-local).
            let event: serde_json::Value = serde_json::from_str(&read(first)?)
                .map_err(|e| format!("{}: {e}", first.display()))?;
            let source = event
                .get("source")
                .and_then(|s| s.as_str())
                .ok_or_else(|| format!("{}: no source", first.display()))?;
            let queue = format!(
                "https://sqs.us-east-1.amazonaws.com/123456789012/claimonce-local-{provider}-events"
            );
            env.push((
                format!("{}_EVENT_SOURCE", provider.to_uppercase()),
                source.to_owned(),
            ));
            env.push(("EVENT_QUEUE_URL".into(), queue.clone()));
            env.push((
                "EVENT_DEAD_LETTER_QUEUE_URL".into(),
                format!("{queue}-dead"),
            ));
        }
        objects.push((
            format!("{}Function", p.get("Name").unwrap_or_default()),
            env,
        ));
    }
    // Written by hand, in insertion order, with Python's json.dumps(indent=2) layout (what
    // the file has always been): non-ASCII escaped as \uXXXX.
    let mut out = String::from("{\n");
    for (i, (name, env)) in objects.iter().enumerate() {
        let _ = writeln!(out, "  {}: {{", json_string(name));
        for (j, (key, value)) in env.iter().enumerate() {
            let comma = if j + 1 < env.len() { "," } else { "" };
            let _ = writeln!(
                out,
                "    {}: {}{comma}",
                json_string(key),
                json_string(value)
            );
        }
        let comma = if i + 1 < objects.len() { "," } else { "" };
        let _ = writeln!(out, "  }}{comma}");
    }
    out.push_str("}\n");
    Ok(out)
}

/// `text` as a JSON string, ASCII only.
fn json_string(text: &str) -> String {
    let mut out = String::from('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c => {
                let mut units = [0_u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push('"');
    out
}

/// The document `text` (at `path`) with every marked block replaced by its rendering.
fn render_doc(path: &str, text: &str, blocks: &BTreeMap<String, String>) -> Result<String, String> {
    const OPEN: &str = "<!-- rendered by scripts/template (deploy/docs.in): ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let after = rest.get(start + OPEN.len()..).unwrap_or_default();
        let Some((name, body)) = after.split_once(" -->\n") else {
            break;
        };
        let end = format!("<!-- end {name} -->");
        let Some(close) = body.find(&end) else {
            return Err(format!("{path}: the block {name} has no {end}"));
        };
        let block = blocks
            .get(name)
            .ok_or_else(|| format!("{path}: no block {name} in deploy/docs.in"))?;
        out.push_str(rest.get(..start).unwrap_or_default());
        let _ = write!(out, "{OPEN}{name} -->\n{block}\n{end}");
        rest = body.get(close + end.len()..).unwrap_or_default();
    }
    out.push_str(rest);
    Ok(out)
}

fn fuzz_registered(providers: &[Values]) -> String {
    let mut out = String::from(
        "//! Rendered by `scripts/template` from the provider registry: every provider crate, with\n\
         //! the constructor its `main.rs` hands to `claimonce::run_from_env`. Do not edit; CI fails\n\
         //! when it is not what the registry renders.\n\
         \n\
         /// Adds every registered provider to `builder`.\n\
         pub(crate) fn add_all(builder: &mut crate::Builder) {\n",
    );
    for p in providers {
        let _ = writeln!(
            out,
            "    builder.add({});",
            p.get("constructor").unwrap_or_default()
        );
    }
    out.push_str("}\n");
    out
}

const FUZZ_BEGIN: &str = "# @registry: one line per provider crate, rendered by scripts/template";
const FUZZ_END: &str = "# @registry end";

fn fuzz_manifest(project: &Path, providers: &[Values]) -> Result<String, String> {
    let text = read(&project.join("fuzz/Cargo.toml"))?;
    let (Some(begin), Some(end)) = (text.find(FUZZ_BEGIN), text.find(FUZZ_END)) else {
        return Err(format!(
            "fuzz/Cargo.toml: no block between {FUZZ_BEGIN:?} and {FUZZ_END:?}"
        ));
    };
    if end < begin {
        return Err(format!(
            "fuzz/Cargo.toml: {FUZZ_END:?} comes before {FUZZ_BEGIN:?}"
        ));
    }
    let mut out = format!("{}{FUZZ_BEGIN}\n", text.get(..begin).unwrap_or_default());
    for p in providers {
        let _ = writeln!(
            out,
            "{} = {{ path = \"../functions/{}\" }}",
            p.get("package").unwrap_or_default(),
            p.get("folder").unwrap_or_default()
        );
    }
    out.push_str(text.get(end..).unwrap_or_default());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What this renders for this repository is what is committed (the files CI's `--check`
    /// holds current), so the port cannot drift from them.
    #[test]
    fn this_repository_renders_its_committed_files() {
        let root = claimonce_root();
        let outputs = render(&root, &root).expect("renders");
        let stale = write_or_check(&root, &outputs, true).expect("compared");
        assert!(stale.is_empty(), "stale: {stale:?}");
        assert_eq!(
            outputs.len(),
            9,
            "template, quickstart, sam-env, fuzz x2, 4 docs"
        );
    }

    /// Each example's template builds its own receiver and its own migrate binary, keeps none
    /// of this repository's senders' parts, and is what the example's template.yaml holds.
    #[test]
    fn an_outside_crate_renders_its_own_binaries() {
        let root = claimonce_root();
        for example in ["paddle", "slack"] {
            let folder = root.join("examples").join(example);
            let outputs = render(&folder, &root).expect("renders");
            let [(path, text), (quickstart, _)] = outputs.as_slice() else {
                panic!("the template and the quick start: {outputs:?}");
            };
            assert_eq!(*path, folder.join("template.yaml"));
            assert_eq!(*quickstart, folder.join("quickstart.yaml"));
            assert!(
                text.contains(&format!("Binary: {example}-webhook\n")),
                "its receiver"
            );
            for job in ["migrate", "sweep", "relay"] {
                assert!(
                    text.contains(&format!("Binary: {example}-{job}\n")),
                    "{example}'s {job}"
                );
            }
            for claimonce in ["migrate", "retention-sweep", "outbox-relay"] {
                assert!(
                    !text.contains(&format!("Binary: {claimonce}\n")),
                    "{claimonce}"
                );
            }
            for other in ["GitHub", "Stripe", "Resend"] {
                assert!(!text.contains(&format!("{other}Recover")), "{other}");
            }
            assert!(!text.contains("%%"), "every placeholder filled");
            for (path, text) in &outputs {
                assert_eq!(
                    read(path).expect("committed"),
                    *text,
                    "run the renderer for {example}"
                );
            }
        }
    }

    /// Slack's deploy table fits its receiver's bounds to Slack's 3 s: they are set in its
    /// function's environment, over the defaults of Globals, and Paddle's, which sets none,
    /// keeps the defaults.
    #[test]
    fn a_deploy_table_s_bounds_reach_its_receiver() {
        let root = claimonce_root();
        let template = |example: &str| {
            let outputs = render(&root.join("examples").join(example), &root).expect("renders");
            outputs
                .into_iter()
                .next()
                .map(|(_, text)| text)
                .unwrap_or_default()
        };
        let slack = template("slack");
        for set in [
            "DB_DELIVERY_TIMEOUT_MS: '1000'",
            "DB_CONNECT_TIMEOUT_MS: '1000'",
            "SPILL_TIMEOUT_MS: '500'",
        ] {
            assert!(slack.contains(&format!("\n          {set}\n")), "{set}");
        }
        let paddle = template("paddle");
        assert_eq!(
            paddle.matches("DB_DELIVERY_TIMEOUT_MS:").count(),
            2,
            "Globals' only, and MigrateSettings' copy of them"
        );
        assert!(!paddle.contains("SPILL_TIMEOUT_MS:"));
    }

    /// The three bounds come together, each a number of milliseconds: one alone, or a value
    /// that is not one, is named with its key.
    #[test]
    fn a_deploy_table_s_bounds_are_all_three_numbers() {
        let base = [
            ("name", "X"),
            ("label", "X"),
            ("retries", "X retries"),
            ("secret", "X's secret"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut deploy = base.to_vec();
            deploy.extend_from_slice(extra);
            deadline(&crate_with(&[], &deploy))
        };
        assert_eq!(with(&[]), Ok(false));
        let all = [
            ("delivery_timeout_ms", "1000"),
            ("connect_timeout_ms", "1000"),
            ("spill_timeout_ms", "500"),
        ];
        assert_eq!(with(&all), Ok(true));
        let alone = with(&all[..1]).expect_err("one of three");
        assert!(
            alone.ends_with(
                "sets delivery_timeout_ms but not connect_timeout_ms: the three bounds fit the \
                 sender's answer window together"
            ),
            "{alone}"
        );
        for bad in ["0", "1s", "", "-5"] {
            let error = with(&[all[0], all[1], ("spill_timeout_ms", bad)]).expect_err(bad);
            assert!(
                error.contains(&format!("spill_timeout_ms = {bad:?}")),
                "{error}"
            );
        }
    }

    fn values_of(provider: &str, api: bool) -> Values {
        Values {
            text: BTreeMap::from([("provider", Some(provider.to_owned()))]),
            retention: false,
            eventbridge: false,
            api,
            deadline: false,
            manifest: format!("{provider}/Cargo.toml"),
        }
    }

    #[test]
    fn a_with_part_is_kept_only_for_a_registered_provider_or_feature() {
        let stripe = [values_of("stripe", true)];
        let paddle = [values_of("paddle", false)];
        let text = "a\n#@with github stripe\nb\n#@end\nc";
        assert_eq!(with_providers(text, &stripe, "t").expect("ok"), "a\nb\nc");
        assert_eq!(with_providers(text, &paddle, "t").expect("ok"), "a\nc");
        let text = "a\n#@with-some eventbridge api\nb\n#@end\nc";
        assert_eq!(with_providers(text, &stripe, "t").expect("ok"), "a\nb\nc");
        assert_eq!(with_providers(text, &paddle, "t").expect("ok"), "a\nc");
        let open = with_providers("x\n#@with github\nb", &paddle, "t").expect_err("unclosed");
        assert_eq!(open, "t:2: #@with has no #@end");
        let unknown = with_providers("#@with-some apis\n#@end", &paddle, "t").expect_err("typo");
        assert_eq!(
            unknown,
            "t:1: no feature apis (eventbridge, api, retention)"
        );
    }

    /// A copied part stays where it is and appears again at each `%%=name%%`, indented as the
    /// placeholder, without its comments; a placeholder naming no part, or a part left open,
    /// is an error.
    #[test]
    fn a_copied_part_is_kept_and_pasted_at_its_placeholder() {
        let text = "a:\n  b:\n#@copy vars\n    # why\n    X: '1'\n    Y:\n      - z\n#@end-copy\nc:\n  %%=vars%%";
        assert_eq!(
            copied(text, "t").expect("ok"),
            "a:\n  b:\n    # why\n    X: '1'\n    Y:\n      - z\nc:\n  X: '1'\n  Y:\n    - z"
        );
        assert_eq!(
            copied("  %%=nothing%%", "t").expect_err("no part"),
            "t: %%=nothing%% names no #@copy nothing"
        );
        assert!(
            copied("#@copy a\nx", "t")
                .expect_err("open")
                .contains("has no #@end-copy")
        );
        assert!(
            copied("#@copy a\n    x\n  y\n#@end-copy\n%%=a%%", "t")
                .expect_err("not a block")
                .contains("indented less")
        );
    }

    fn crate_with(binaries: &[&str], deploy: &[(&str, &str)]) -> Provider {
        Provider {
            provider: "x".into(),
            package: "x-webhook".into(),
            description: None,
            folder: PathBuf::from("team/x"),
            binaries: binaries.iter().map(|b| (*b).to_owned()).collect(),
            binary: "x-webhook".into(),
            constructor: Some("x_webhook::X::from_secret".into()),
            entry: vec![("secret_var".into(), "X_WEBHOOK_SECRET".into())],
            deploy: deploy
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            samples: Vec::new(),
            migrations: Vec::new(),
        }
    }

    /// A team's jobs are its crate's `<provider>-migrate`, `-sweep` and `-relay`; one missing
    /// is named with the manifest to add it to.
    #[test]
    fn a_team_s_jobs_are_its_own_binaries() {
        let all = crate_with(&["x-webhook", "x-migrate", "x-sweep", "x-relay"], &[]);
        assert_eq!(
            Jobs::of(&[all]),
            Ok(Jobs {
                migrate: "x-migrate".into(),
                sweep: "x-sweep".into(),
                relay: "x-relay".into(),
            })
        );
        let no_relay = crate_with(&["x-webhook", "x-migrate", "x-sweep", "migrate"], &[]);
        let error = Jobs::of(&[no_relay]).expect_err("no relay");
        assert!(
            error.starts_with("team/x/Cargo.toml: no [[bin]] named <provider>-relay"),
            "{error}"
        );
    }

    /// A crate without the deploy table, or with one missing a key, is named with the table
    /// and key.
    #[test]
    fn a_missing_deploy_key_names_the_manifest_and_the_key() {
        let project = Path::new("team");
        let none = values(project, &crate_with(&[], &[])).expect_err("no table");
        assert_eq!(
            none,
            "team/x/Cargo.toml: the registry entry needs a [package.metadata.claimonce.deploy] table"
        );
        let partial = crate_with(
            &[],
            &[("name", "X"), ("label", "X"), ("retries", "X retries")],
        );
        let error = values(project, &partial).expect_err("no secret");
        assert_eq!(
            error,
            "team/x/Cargo.toml: [package.metadata.claimonce.deploy] has no secret"
        );
    }

    #[test]
    fn a_missing_value_names_the_manifest() {
        let deploy = Deploy {
            root: PathBuf::new(),
            fragments: BTreeMap::new(),
        };
        let p = Values {
            text: BTreeMap::from([("retention", None)]),
            retention: false,
            eventbridge: false,
            api: false,
            deadline: false,
            manifest: "x/Cargo.toml".into(),
        };
        assert_eq!(
            deploy.fill("a %%retention%% b", &p).expect_err("no value"),
            "deploy/: no value for %%retention%% (x/Cargo.toml has none)"
        );
        assert_eq!(deploy.fill("100%% %%", &p).expect("no key"), "100%% %%");
    }
}
