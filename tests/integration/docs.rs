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
