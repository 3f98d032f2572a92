//! The reader of a manifest's TOML, line by line, in the shape the registry entries are
//! written (the crate's documentation says which lines it reads).

/// One line of a manifest, as the registry reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// `[name]`.
    Table(&'a str),
    /// `[[name]]`.
    ArrayTable(&'a str),
    /// `key = "text"`: the key without its quotes, the text without its quotes.
    Text(&'a str, &'a str),
    /// `key = <anything else>`: the value's text up to any comment (`true`, `12`, `[`…).
    Other(&'a str, &'a str),
    /// A blank line, a comment, or a line of no shape above (an array's continuation).
    Blank,
}

/// The line of `text` that starts at byte `at`, and the byte where the next one starts
/// (`text.len()` after the last).
pub const fn line_at(text: &str, at: usize) -> (Line<'_>, usize) {
    let bytes = text.as_bytes();
    if at >= bytes.len() {
        return (Line::Blank, bytes.len());
    }
    let (_, rest) = bytes.split_at(at);
    let mut length = 0;
    let mut cursor = rest;
    while let [first, tail @ ..] = cursor {
        if *first == b'\n' {
            break;
        }
        length += 1;
        cursor = tail;
    }
    let (line, _) = rest.split_at(length);
    let next = if at + length < bytes.len() {
        at + length + 1
    } else {
        bytes.len()
    };
    (parse_line(line.trim_ascii()), next)
}

const fn parse_line(line: &[u8]) -> Line<'_> {
    match line {
        [b'[', b'[', inner @ ..] => match until(inner, b']') {
            Some((name, _)) => Line::ArrayTable(text(name.trim_ascii())),
            None => Line::Blank,
        },
        [b'[', inner @ ..] => match until(inner, b']') {
            Some((name, _)) => Line::Table(text(name.trim_ascii())),
            None => Line::Blank,
        },
        [] | [b'#', ..] => Line::Blank,
        [b'"', quoted @ ..] => match until(quoted, b'"') {
            Some((key, rest)) => match rest.trim_ascii_start() {
                [b'=', value @ ..] => pair(text(key), value),
                _ => Line::Blank,
            },
            None => Line::Blank,
        },
        _ => match until(line, b'=') {
            Some((key, value)) => pair(text(key.trim_ascii()), value),
            None => Line::Blank,
        },
    }
}

/// A `key = value` line's value.
const fn pair<'a>(key: &'a str, value: &'a [u8]) -> Line<'a> {
    match value.trim_ascii() {
        [b'"', quoted @ ..] => match until(quoted, b'"') {
            Some((inner, _)) if !contains(inner, b'\\') => Line::Text(key, text(inner)),
            _ => Line::Other(key, text(value.trim_ascii())),
        },
        // A literal string, which has no escapes: for a value with a `"` in it.
        [b'\'', quoted @ ..] => match until(quoted, b'\'') {
            Some((inner, _)) => Line::Text(key, text(inner)),
            None => Line::Other(key, text(value.trim_ascii())),
        },
        other => match until(other, b'#') {
            Some((before, _)) => Line::Other(key, text(before.trim_ascii())),
            None => Line::Other(key, text(other)),
        },
    }
}

/// The bytes before the first `stop`, and those after it.
const fn until(bytes: &[u8], stop: u8) -> Option<(&[u8], &[u8])> {
    let mut at = 0;
    let mut cursor = bytes;
    while let [first, tail @ ..] = cursor {
        if *first == stop {
            let (before, after) = bytes.split_at(at);
            let (_, after) = after.split_at(1);
            return Some((before, after));
        }
        at += 1;
        cursor = tail;
    }
    None
}

const fn contains(bytes: &[u8], wanted: u8) -> bool {
    until(bytes, wanted).is_some()
}

/// Bytes cut out of a `&str` at ASCII bytes, which are always a `&str` again.
const fn text(bytes: &[u8]) -> &str {
    match core::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(_) => "",
    }
}

const fn same(a: &str, b: &str) -> bool {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a, b) {
            ([], []) => return true,
            ([x, a_rest @ ..], [y, b_rest @ ..]) if *x == *y => {
                a = a_rest;
                b = b_rest;
            }
            _ => return false,
        }
    }
}

/// The text of `key` in `[table]` of a manifest: `Some` for a `key = "text"` line only.
pub const fn value<'a>(manifest: &'a str, table: &str, key: &str) -> Option<&'a str> {
    let mut at = 0;
    let mut inside = false;
    while at < manifest.len() {
        let (line, next) = line_at(manifest, at);
        match line {
            Line::Table(name) => inside = same(name, table),
            Line::ArrayTable(_) => inside = false,
            Line::Text(k, text) if inside && same(k, key) => return Some(text),
            _ => {}
        }
        at = next;
    }
    None
}

/// The lines of a manifest, in order ([`line_at`] over the whole text).
pub fn lines(manifest: &str) -> impl Iterator<Item = Line<'_>> {
    let mut at = 0;
    std::iter::from_fn(move || {
        (at < manifest.len()).then(|| {
            let (line, next) = line_at(manifest, at);
            at = next;
            line
        })
    })
}

/// Each line of a manifest with the header of the table it is in (`[name]` or `[[name]]`; ""
/// before the first).
fn in_tables(manifest: &str) -> impl Iterator<Item = (&str, Line<'_>)> {
    let mut current = "";
    lines(manifest).map(move |line| {
        if let Line::Table(name) | Line::ArrayTable(name) = line {
            current = name;
        }
        (current, line)
    })
}

/// The `key = value` pairs of `[table]`, in order, each value as [`Line::Text`] or
/// [`Line::Other`] gives it.
pub fn table<'a>(manifest: &'a str, table: &str) -> Vec<(&'a str, &'a str)> {
    in_tables(manifest)
        .filter_map(|(name, line)| match line {
            Line::Text(key, value) | Line::Other(key, value) if name == table => Some((key, value)),
            _ => None,
        })
        .collect()
}

/// The `name` of each `[[<array>]]` table (a manifest's `[[bin]]`s), in order.
pub fn array_names<'a>(manifest: &'a str, array: &str) -> Vec<&'a str> {
    in_tables(manifest)
        .filter_map(|(table, line)| match line {
            Line::Text("name", name) if table == array => Some(name),
            _ => None,
        })
        .collect()
}

/// The strings of the array `key` in `[table]` (a workspace's `members`), which may span
/// lines.
pub fn array<'a>(manifest: &'a str, table: &str, key: &str) -> Vec<&'a str> {
    let mut at = 0;
    for (name, line) in in_tables(manifest) {
        let start = at;
        at = line_at(manifest, at).1;
        if let Line::Other(k, value) = line
            && name == table
            && k == key
            && value.starts_with('[')
        {
            let rest = manifest.get(start..).unwrap_or_default();
            let rest = rest.split_once('[').map_or("", |(_, after)| after);
            return strings(rest.split_once(']').map_or(rest, |(items, _)| items));
        }
    }
    Vec::new()
}

/// The `"…"` strings of an array's text, its comments left out.
fn strings(text: &str) -> Vec<&str> {
    text.lines()
        .flat_map(|line| {
            let code = line.split('#').next().unwrap_or_default();
            code.split('"').skip(1).step_by(2)
        })
        .collect()
}

/// The `path` of the `[[bin]]` named `name`.
pub(crate) fn bin_path(manifest: &str, name: &str) -> Option<String> {
    let mut current = None;
    for (table, line) in in_tables(manifest) {
        match line {
            Line::ArrayTable(_) => current = None,
            Line::Text("name", bin) if table == "bin" => current = Some(bin),
            Line::Text("path", path) if table == "bin" && current == Some(name) => {
                return Some(path.to_owned());
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DEPLOY, SAMPLES, entry_value, provider_name};

    const MANIFEST: &str = r#"
[package]
name = "x-webhook"
provider = "not-this-one"

[package.metadata.claimonce]
# a comment
provider = "x"
secret_var = "X_WEBHOOK_SECRET" # the secrets
escaped = "a\"b"
literal = 'a "b"' # kept

[package.metadata.claimonce.deploy]
secret_var = "NOT_THIS_ONE"
retention = "never" # kept
eventbridge = true

[package.metadata.claimonce.samples]
"eventbridge/a.json" = "does `a`"

[[bin]]
name = "x-webhook"
path = "src/main.rs"

[[bin]]
name = "x-sign"

[workspace]
members = [
    "shared", # the core
    "functions/*",
]
"#;

    // Evaluated by the compiler: the const reader is what a function binary uses.
    const NAME: &str = provider_name(MANIFEST);

    #[test]
    fn a_value_is_read_from_its_own_table_only() {
        assert_eq!(NAME, "x");
        assert_eq!(
            entry_value(MANIFEST, "secret_var"),
            Some("X_WEBHOOK_SECRET")
        );
        assert_eq!(entry_value(MANIFEST, "retention"), None);
        assert_eq!(
            entry_value(MANIFEST, "escaped"),
            None,
            "escapes are not read"
        );
        assert_eq!(entry_value(MANIFEST, "literal"), Some("a \"b\""));
        assert_eq!(value(MANIFEST, DEPLOY, "retention"), Some("never"));
        assert_eq!(value(MANIFEST, DEPLOY, "provider"), None);
        assert_eq!(value(MANIFEST, "package", "name"), Some("x-webhook"));
        assert_eq!(
            table(MANIFEST, DEPLOY),
            [
                ("secret_var", "NOT_THIS_ONE"),
                ("retention", "never"),
                ("eventbridge", "true")
            ]
        );
        assert_eq!(
            table(MANIFEST, SAMPLES),
            [("eventbridge/a.json", "does `a`")]
        );
        assert_eq!(array_names(MANIFEST, "bin"), ["x-webhook", "x-sign"]);
        assert_eq!(
            bin_path(MANIFEST, "x-webhook").as_deref(),
            Some("src/main.rs")
        );
        assert_eq!(bin_path(MANIFEST, "x-sign"), None);
        assert_eq!(
            array(MANIFEST, "workspace", "members"),
            ["shared", "functions/*"]
        );
    }
}
