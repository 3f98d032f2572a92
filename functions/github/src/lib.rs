//! GitHub: `X-Hub-Signature-256` over the raw body, the event name and delivery id from
//! GitHub's unsigned headers, a GitHub App's installations kept newest-first, and every other
//! event forwarded to the outbox unchanged.
//!
//! **The ledger key is the body's SHA-256.** GitHub signs the body and nothing else: no
//! timestamp, no id. Its delivery id (`X-GitHub-Delivery`) is an unsigned header, so keyed by
//! it, a captured body re-sent under a fresh id would be a new event. Keyed by the hash of
//! what the signature covers, GitHub's own redelivery (the same body) and a replay under any
//! headers are both duplicates. The delivery id is still logged, to find the delivery in
//! GitHub's settings. What this costs is in
//! docs/decisions/0021-githubs-ledger-key-is-the-bodys-hash.md.

use claimonce::prelude::*;
use claimonce::timestamp::{is_rfc3339, rfc3339_from_unix};
use claimonce::verify::body_hmac::{BodyHmac, Encoding};
use claimonce::verify::lower_hex;
use serde::Deserialize;

/// The header GitHub signs with (lower case, as `http` stores header names).
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";
/// Its name as GitHub writes it, as a forwarded message names it.
const SIGNATURE_HEADER_NAME: &str = "X-Hub-Signature-256";
/// GitHub's event name (unsigned).
pub const EVENT_HEADER: &str = "x-github-event";
/// GitHub's id of the delivery (unsigned); a redelivery repeats it.
pub const DELIVERY_HEADER: &str = "x-github-delivery";
/// Longest event name accepted (GitHub's longest is about 40 characters).
const MAX_EVENT_NAME: usize = 64;

/// The GitHub receiver's provider half.
#[derive(Debug, Clone)]
pub struct GitHub {
    verifier: BodyHmac,
}

impl GitHub {
    /// A provider that accepts signatures from any of `secrets` (several during a rotation).
    pub fn new(secrets: &[&str]) -> Result<Self, ConfigError> {
        let verifier = BodyHmac::new(SIGNATURE_HEADER, "sha256=", Encoding::LowerHex, secrets)
            .ok_or_else(|| ConfigError::new("GITHUB_WEBHOOK_SECRET holds no secret".into()))?;
        Ok(Self { verifier })
    }

    /// From the secrets' text, comma-separated during a rotation (`GITHUB_WEBHOOK_SECRET`, or the
    /// secret `GITHUB_WEBHOOK_SECRET_ARN` names: `claimonce::secrets`).
    pub fn from_secret(raw: &str) -> Result<Self, ConfigError> {
        Self::new(&split_secrets(raw))
    }
}

/// What an event does.
#[derive(Debug, Clone)]
pub enum GitHubEvent {
    /// An `installation` or `installation_repositories` event: keep the installation's newest
    /// state and the repositories it can reach.
    Installation(Installation),
    /// `ping` (sent when a webhook is created): claimed and answered 200, nothing else.
    Ping,
    /// Any other event: handed to the outbox unchanged, under the topic `github.<event>`.
    Forward {
        /// `github.<X-GitHub-Event>`.
        topic: String,
        /// The signed body.
        body: Forwardable,
    },
}

/// The state an installation event leaves, with what orders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    /// `installation.id`.
    pub id: i64,
    /// `installation.account.login` (an enterprise's `slug`).
    pub account_login: String,
    /// `installation.account.id`.
    pub account_id: i64,
    /// `installation.repository_selection`: `all` or `selected`.
    pub repository_selection: String,
    /// `active`, `suspended` or `deleted`.
    pub state: &'static str,
    /// `installation.updated_at`, RFC 3339: newer wins.
    pub updated_at: String,
    /// Breaks a same-second tie: 0 created, 1 any other action, 2 deleted.
    pub rank: i16,
    /// Repositories the event says the installation reaches: `(id, full_name)`.
    pub added: Vec<(i64, String)>,
    /// Repositories the event says it no longer reaches.
    pub removed: Vec<i64>,
}

#[derive(Deserialize)]
struct InstallationBody {
    action: String,
    installation: InstallationObject,
    #[serde(default)]
    repositories: Option<Vec<Repository>>,
    /// Present only in `installation_repositories` bodies: how the event name is held to the
    /// body it came with.
    #[serde(default)]
    repositories_added: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct RepositoriesBody {
    action: String,
    installation: InstallationObject,
    repositories_added: Vec<Repository>,
    repositories_removed: Vec<Repository>,
}

#[derive(Deserialize)]
struct InstallationObject {
    id: i64,
    account: Account,
    repository_selection: String,
    updated_at: Stamp,
    #[serde(default)]
    suspended_at: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Account {
    id: i64,
    /// A user's or organization's login; an enterprise account has a slug instead.
    #[serde(alias = "slug")]
    login: String,
}

/// GitHub sends most timestamps as RFC 3339 text, some as Unix seconds.
#[derive(Deserialize)]
#[serde(untagged)]
enum Stamp {
    Text(String),
    Seconds(i64),
}

#[derive(Deserialize)]
struct Repository {
    id: i64,
    full_name: String,
}

#[derive(Deserialize)]
struct WithAction {
    action: Option<String>,
    /// `zen` and `hook_id` together make a `ping` body.
    zen: Option<serde::de::IgnoredAny>,
    hook_id: Option<serde::de::IgnoredAny>,
}

fn invalid(detail: &'static str) -> Rejection {
    Rejection::new(Problem::InvalidPayload, detail)
}

/// Reads a GitHub delivery: the event name from `X-GitHub-Event`, the body as that event.
pub fn parse_event(
    signed: &Signed<'_>,
    unsigned: &Unsigned<'_>,
) -> Result<Parsed<GitHubEvent>, Rejection> {
    let name = unsigned
        .header(EVENT_HEADER)?
        .ok_or_else(|| invalid("the X-GitHub-Event header is missing"))?;
    if name.is_empty()
        || name.len() > MAX_EVENT_NAME
        || !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
    {
        return Err(invalid("the X-GitHub-Event header is not an event name"));
    }
    let delivery_id = unsigned
        .header(DELIVERY_HEADER)?
        .map(EventId::new)
        .transpose()?;
    let body = signed.body();
    let (action, event) = match name {
        "ping" => (None, GitHubEvent::Ping),
        "installation" => {
            let b: InstallationBody = serde_json::from_slice(body)
                .map_err(|_| invalid("the body is not an installation event"))?;
            if b.repositories_added.is_some() {
                return Err(invalid(
                    "the body is an installation_repositories event, not an installation event",
                ));
            }
            let (state, rank) = match b.action.as_str() {
                "created" => ("active", 0),
                "deleted" => ("deleted", 2),
                "suspend" => ("suspended", 1),
                "unsuspend" => ("active", 1),
                "new_permissions_accepted" if b.installation.suspended_at.is_some() => {
                    ("suspended", 1)
                }
                "new_permissions_accepted" => ("active", 1),
                // An action this receiver does not know changes no state: handed on.
                _ => return forward(name, Some(b.action), signed, unsigned, delivery_id),
            };
            let added = b.repositories.unwrap_or_default();
            let installation = installation(b.installation, state, rank, added, Vec::new())?;
            (Some(b.action), GitHubEvent::Installation(installation))
        }
        "installation_repositories" => {
            let b: RepositoriesBody = serde_json::from_slice(body)
                .map_err(|_| invalid("the body is not an installation_repositories event"))?;
            if !matches!(b.action.as_str(), "added" | "removed") {
                return forward(name, Some(b.action), signed, unsigned, delivery_id);
            }
            let state = if b.installation.suspended_at.is_some() {
                "suspended"
            } else {
                "active"
            };
            let installation = installation(
                b.installation,
                state,
                1,
                b.repositories_added,
                b.repositories_removed,
            )?;
            (Some(b.action), GitHubEvent::Installation(installation))
        }
        other => {
            let b = serde_json::from_slice::<WithAction>(body)
                .map_err(|_| invalid("the body is not a GitHub event"))?;
            if b.zen.is_some() && b.hook_id.is_some() {
                return Err(invalid(
                    "the body is a ping event, sent under another event name",
                ));
            }
            return forward(other, b.action, signed, unsigned, delivery_id);
        }
    };
    parsed(name, action, signed, delivery_id, event)
}

/// An event with no effect of its own, handed to the outbox unchanged, with the signature
/// that covers it.
fn forward(
    name: &str,
    action: Option<String>,
    signed: &Signed<'_>,
    unsigned: &Unsigned<'_>,
    delivery_id: Option<EventId>,
) -> Result<Parsed<GitHubEvent>, Rejection> {
    let mut body = Forwardable::new(signed.body())?;
    if let Some(signature) = unsigned.header(SIGNATURE_HEADER)? {
        body = body.signed_by(SIGNATURE_HEADER_NAME, signature)?;
    }
    let event = GitHubEvent::Forward {
        topic: format!("github.{name}"),
        body,
    };
    parsed(name, action, signed, delivery_id, event)
}

/// The ledger key is the SHA-256 of the signed body; the type is `<event>[.<action>]`.
fn parsed(
    name: &str,
    action: Option<String>,
    signed: &Signed<'_>,
    delivery_id: Option<EventId>,
    event: GitHubEvent,
) -> Result<Parsed<GitHubEvent>, Rejection> {
    let event_type = match action {
        Some(action) if action.len() <= MAX_EVENT_NAME && !action.contains('\0') => {
            format!("{name}.{action}")
        }
        Some(_) => return Err(invalid("the event's action is not an action name")),
        None => name.to_owned(),
    };
    let mut parsed = Parsed::new(EventId::new(lower_hex(signed.sha256()))?, event_type, event);
    parsed.delivery_id = delivery_id;
    Ok(parsed)
}

fn installation(
    object: InstallationObject,
    state: &'static str,
    rank: i16,
    added: Vec<Repository>,
    removed: Vec<Repository>,
) -> Result<Installation, Rejection> {
    let updated_at = match object.updated_at {
        Stamp::Text(t) if is_rfc3339(&t) => t,
        Stamp::Seconds(s) => rfc3339_from_unix(s)
            .ok_or_else(|| invalid("installation.updated_at is out of range"))?,
        Stamp::Text(_) => return Err(invalid("installation.updated_at is not RFC 3339")),
    };
    // One event names a repository once: listed twice, the effect's upsert would meet its own
    // row (21000) on every retry, and listed as added and removed it would say both.
    let mut ids: Vec<i64> = added.iter().chain(&removed).map(|r| r.id).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w.first() == w.get(1)) {
        return Err(invalid("the event lists a repository more than once"));
    }
    let stored = [&object.account.login, &object.repository_selection];
    if stored
        .into_iter()
        .chain(added.iter().map(|r| &r.full_name))
        .any(|s| s.contains('\0'))
    {
        return Err(invalid(
            "the event carries a NUL character, which cannot be stored",
        ));
    }
    Ok(Installation {
        id: object.id,
        account_login: object.account.login,
        account_id: object.account.id,
        repository_selection: object.repository_selection,
        state,
        updated_at,
        rank,
        added: added.into_iter().map(|r| (r.id, r.full_name)).collect(),
        removed: removed.into_iter().map(|r| r.id).collect(),
    })
}

/// The event's effect: `github_keep_installation_v2` (migration V10) for installations, the
/// shared forward for the rest, none for `ping`.
pub fn effect(event: &GitHubEvent) -> Option<Effect> {
    match event {
        GitHubEvent::Ping => None,
        GitHubEvent::Forward { topic, body } => Some(Effect::forward(topic.clone(), body.clone())),
        GitHubEvent::Installation(i) => {
            let (added_ids, added_names): (Vec<i64>, Vec<String>) = i.added.iter().cloned().unzip();
            Some(Effect::call(
                "github_keep_installation_v2",
                vec![
                    Param::new(i.id, Type::INT8),
                    Param::new(i.account_login.clone(), Type::TEXT),
                    Param::new(i.account_id, Type::INT8),
                    Param::new(i.repository_selection.clone(), Type::TEXT),
                    Param::new(i.state.to_owned(), Type::TEXT),
                    Param::new(i.updated_at.clone(), Type::TEXT),
                    Param::new(i.rank, Type::INT2),
                    Param::new(added_ids, Type::INT8_ARRAY),
                    Param::new(added_names, Type::TEXT_ARRAY),
                    Param::new(i.removed.clone(), Type::INT8_ARRAY),
                ],
            ))
        }
    }
}

impl Provider for GitHub {
    type Event = GitHubEvent;
    type Rust<'e> = NoRustEffect;

    // The registry entry: the provider's name and secret variable, written once, there.
    const MANIFEST: &'static str = include_str!("../Cargo.toml");

    fn verifier(&self) -> Option<&dyn Scheme> {
        Some(&self.verifier)
    }

    fn parse(
        &self,
        signed: &Signed<'_>,
        unsigned: &Unsigned<'_>,
    ) -> Result<Parsed<GitHubEvent>, Rejection> {
        parse_event(signed, unsigned)
    }

    fn plan<'e>(&'e self, event: &'e Parsed<GitHubEvent>) -> Plan<NoRustEffect> {
        effect(&event.event).into()
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::*;

    fn parse(event: &str, body: &[u8]) -> Result<Parsed<GitHubEvent>, Rejection> {
        let mut headers = HeaderMap::new();
        headers.insert(EVENT_HEADER, event.parse().expect("name"));
        headers.insert(
            DELIVERY_HEADER,
            "72d3162e-cc78-11e3-81ab-4c9367dc0958".parse().expect("id"),
        );
        parse_event(&signed(body, &mut headers), &Unsigned::new(&headers))
    }

    /// `body` signed through the provider's own scheme, then verified as the receiver does.
    fn signed<'b>(body: &'b [u8], headers: &mut HeaderMap) -> Signed<'b> {
        let provider = GitHub::from_secret("test-secret").expect("a secret");
        let scheme = provider.verifier().expect("a scheme");
        scheme.sign_into(headers, body, 0, "");
        Signed::verify(scheme, headers, body, 0).expect("signed")
    }

    const CREATED: &[u8] = br#"{"action":"created","installation":{"id":42,
        "account":{"login":"octo-org","id":9,"type":"Organization"},
        "repository_selection":"selected","updated_at":"2024-05-01T10:00:00Z",
        "suspended_at":null},
        "repositories":[{"id":1,"name":"a","full_name":"octo-org/a","private":false}],
        "sender":{"login":"octocat","id":1}}"#;

    #[test]
    fn an_installation_is_read_with_its_order_and_repositories() {
        let parsed = parse("installation", CREATED).expect("valid");
        let mut signature = HeaderMap::new();
        let sha256 = *signed(CREATED, &mut signature).sha256();
        assert_eq!(
            parsed.event_id.as_str(),
            claimonce::verify::lower_hex(&sha256),
            "the body's hash"
        );
        assert_eq!(parsed.event_type, "installation.created");
        assert_eq!(
            parsed.delivery_id.as_ref().map(EventId::as_str),
            Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
        );
        let GitHubEvent::Installation(i) = parsed.event else {
            panic!("an installation");
        };
        assert_eq!(
            i,
            Installation {
                id: 42,
                account_login: "octo-org".into(),
                account_id: 9,
                repository_selection: "selected".into(),
                state: "active",
                updated_at: "2024-05-01T10:00:00Z".into(),
                rank: 0,
                added: vec![(1, "octo-org/a".into())],
                removed: vec![],
            }
        );
    }

    #[test]
    fn unix_seconds_are_a_timestamp_too() {
        let body = String::from_utf8_lossy(CREATED)
            .replace(r#""2024-05-01T10:00:00Z""#, "1714557600")
            .replace(r#""created""#, r#""suspend""#);
        let GitHubEvent::Installation(i) =
            parse("installation", body.as_bytes()).expect("valid").event
        else {
            panic!("an installation");
        };
        assert_eq!(
            (i.updated_at.as_str(), i.state, i.rank),
            ("2024-05-01T10:00:00Z", "suspended", 1)
        );
    }

    #[test]
    fn ping_is_claimed_with_no_effect_and_other_events_are_forwarded() {
        let ping = parse("ping", br#"{"zen":"Design for failure.","hook_id":1}"#).expect("ok");
        assert_eq!(ping.event_type, "ping");
        assert!(effect(&ping.event).is_none());
        let push = parse("push", br#"{"ref":"refs/heads/main","commits":[]}"#).expect("ok");
        assert_eq!(push.event_type, "push");
        let issue = parse("issues", br#"{"action":"opened","issue":{"number":1}}"#).expect("ok");
        assert_eq!(issue.event_type, "issues.opened");
        let Some(effect) = effect(&issue.event) else {
            panic!("forwarded");
        };
        assert_eq!(effect.function(), claimonce::jobs::FORWARD_FUNCTION);
    }

    #[test]
    fn an_event_name_cannot_move_a_body_to_another_effect() {
        // A body replayed under another X-GitHub-Event (unsigned) after its ledger row is gone
        // must not reach an effect its own event never had.
        let repositories = br#"{"action":"added","installation":{"id":42,
            "account":{"login":"octo-org","id":9},"repository_selection":"selected",
            "updated_at":"2024-05-01T10:00:00Z"},
            "repositories_added":[{"id":1,"full_name":"octo-org/a"}],"repositories_removed":[]}"#;
        assert!(matches!(
            parse("installation_repositories", repositories)
                .expect("its own name")
                .event,
            GitHubEvent::Installation(_)
        ));
        let ping = br#"{"zen":"Design for failure.","hook_id":1,"hook":{"id":1}}"#;
        for (name, body) in [
            ("installation", &repositories[..]),
            ("push", ping),
            ("issues", ping),
        ] {
            assert_eq!(
                parse(name, body).expect_err("refused").problem,
                Problem::InvalidPayload,
                "{name}"
            );
        }
    }

    #[test]
    fn bodies_and_headers_that_can_never_succeed_are_400() {
        let cases: [(&str, &[u8]); 7] = [
            ("installation", b"not json"),
            ("installation", br#"{"action":"created"}"#),
            (
                "installation",
                &String::from_utf8_lossy(CREATED)
                    .replace("2024-05-01T10:00:00Z", "2024-05-01T10:00:00+16:00")
                    .into_bytes()
                    .leak()[..],
            ),
            (
                "installation",
                &String::from_utf8_lossy(CREATED)
                    .replace("octo-org/a", "octo\\u0000")
                    .into_bytes()
                    .leak()[..],
            ),
            (
                "installation_repositories",
                CREATED.strip_suffix(b"}").unwrap_or(CREATED),
            ),
            ("push", br#"{"ref":"x\u0000"}"#),
            ("Push", br#"{}"#),
        ];
        for (event, body) in cases {
            assert_eq!(
                parse(event, body).expect_err("refused").problem,
                Problem::InvalidPayload,
                "{event}: {}",
                String::from_utf8_lossy(body)
            );
        }
        let mut signature = HeaderMap::new();
        let none = HeaderMap::new();
        assert_eq!(
            parse_event(&signed(b"{}", &mut signature), &Unsigned::new(&none))
                .expect_err("no event name")
                .problem,
            Problem::InvalidPayload
        );
    }
}
