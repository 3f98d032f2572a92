//! The login defaults: the handler and job users a run configures (`DB_HANDLER_USERS`,
//! `DB_JOB_USERS`, `DB_HANDLER_SECRETS`), their timeouts and provider roles, and the logins
//! `DB_CREATE_LOGINS` makes.

use std::fmt;

use claimonce::prelude::ConfigError;
use serde_json::Value;
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::{Options, database_error};

/// A PostgreSQL role name from `DB_HANDLER_USERS`: 1 to 63 ASCII letters, digits, `_` or
/// `-`, starting with a letter or `_`. Always written double-quoted into SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleName(pub(crate) String);

impl RoleName {
    /// Checks a role name; the error names it (a role name is not a secret).
    pub fn parse(name: &str) -> Result<Self, ConfigError> {
        let mut chars = name.chars();
        let valid = name.len() <= 63
            && chars
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if valid {
            Ok(Self(name.to_owned()))
        } else {
            Err(ConfigError::new(format!(
                "DB_HANDLER_USERS: {name:?} is not a role name this function accepts (1 to 63 \
                 ASCII letters, digits, _ or -, starting with a letter or _)"
            )))
        }
    }

    /// The name as an SQL identifier. The characters allowed cannot end the quotes.
    pub(crate) fn quoted(&self) -> String {
        format!("\"{}\"", self.0)
    }

    /// The name as an SQL string literal. The characters allowed cannot end the quotes.
    pub(crate) fn literal(&self) -> String {
        format!("'{}'", self.0)
    }
}

impl fmt::Display for RoleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One entry of `DB_HANDLER_USERS`: a webhook function's login user and, when given
/// (`user:role`), the provider role it is moved onto.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerUser {
    /// The login user.
    pub user: RoleName,
    /// Its provider's role (`claimonce_<provider>`), granted by every run.
    pub role: Option<RoleName>,
}

impl HandlerUser {
    /// Reads `user` or `user:role`; the error names the entry (role names are not secrets).
    pub fn parse(entry: &str) -> Result<Self, ConfigError> {
        Ok(match entry.split_once(':') {
            None => Self {
                user: RoleName::parse(entry)?,
                role: None,
            },
            Some((user, role)) if role.starts_with("claimonce_") => Self {
                user: RoleName::parse(user)?,
                role: Some(RoleName::parse(role)?),
            },
            Some(_) => {
                return Err(ConfigError::new(format!(
                    "DB_HANDLER_USERS: {entry:?}: the role after ':' is a provider's role, \
                     claimonce_<provider>"
                )));
            }
        })
    }
}

/// The receivers' login users named in their database secrets: `DB_HANDLER_SECRETS`, each
/// entry `claimonce_<provider>=<secret ARN>`, the secret the standard RDS JSON whose
/// `username` is the receiver's login (a stack with `DatabaseAuth=secret`). Each is read with
/// `aws` and becomes `username:claimonce_<provider>`, so every deployed receiver's login gets
/// its provider's role and its timeouts without being listed by hand. A secret that cannot be
/// read, or names no user, is a configuration error naming its provider's role (never the
/// secret's text).
pub async fn handler_users_from_secrets(
    raw: &str,
    aws: &aws_config::SdkConfig,
) -> Result<Vec<HandlerUser>, ConfigError> {
    let mut users = Vec::new();
    for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((role, arn)) = entry.split_once('=') else {
            return Err(ConfigError::new(format!(
                "DB_HANDLER_SECRETS: an entry is not claimonce_<provider>=<secret ARN> \
                 ({} characters)",
                entry.len()
            )));
        };
        if !role.starts_with("claimonce_") {
            return Err(ConfigError::new(format!(
                "DB_HANDLER_SECRETS: {role:?} is not a provider's role, claimonce_<provider>"
            )));
        }
        let role = RoleName::parse(role)?;
        let what = format!("the database secret of {role}'s receiver");
        let text = claimonce::jobs::fetch_secret_string(aws, arn, &what)
            .await
            .map_err(|e| ConfigError::new(format!("DB_HANDLER_SECRETS: {e}")))?;
        let username = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get("username")?.as_str().map(str::to_owned))
            .ok_or_else(|| {
                ConfigError::new(format!(
                    "DB_HANDLER_SECRETS: {what} holds no username (the standard RDS secret JSON)"
                ))
            })?;
        users.push(HandlerUser {
            user: RoleName::parse(&username)?,
            role: Some(role),
        });
    }
    Ok(users)
}

/// The handler users' `lock_timeout`, in milliseconds, unless their statement timeout is
/// shorter: what the shipped effect functions set for themselves.
const HANDLER_LOCK_TIMEOUT_MS: u128 = 2000;

/// Sets `statement_timeout`, `idle_in_transaction_session_timeout` and `lock_timeout` as login-role defaults
/// of every handler user, so each new session of theirs starts with them, and moves a user
/// given with its provider's role onto that role. Idempotent: the same value set again, or a
/// role granted again, changes nothing. A role that does not exist fails the run with its name.
pub(crate) async fn configure_handlers(
    client: &Client,
    options: &Options,
    create: bool,
) -> Result<(), String> {
    if let Some(granted) = options.create_logins.as_ref().filter(|_| create) {
        create_logins(client, options, granted).await?;
    }
    let ms = options.handler_timeout.as_millis();
    for HandlerUser { user, role } in &options.job_users {
        let role = role.as_ref().map(RoleName::quoted).unwrap_or_default();
        client
            .batch_execute(&format!("GRANT {role} TO {}", user.quoted()))
            .await
            .map_err(|e| {
                format!(
                    "DB_JOB_USERS: granting {role} to {user} failed: {}",
                    database_error(&e)
                )
            })?;
    }
    for HandlerUser { user, role } in &options.handler_users {
        for name in std::iter::once(user).chain(role) {
            let found = client
                .query_typed(
                    "SELECT 1 FROM pg_roles WHERE rolname = $1",
                    &[(&name.0, Type::TEXT)],
                )
                .await
                .map_err(|e| {
                    format!(
                        "DB_HANDLER_USERS: looking up role {name}: {}",
                        database_error(&e)
                    )
                })?;
            if found.is_empty() {
                return Err(format!(
                    "DB_HANDLER_USERS: role {name} does not exist; create it before deploying \
                     (DEPLOY.md, \"Database users and roles\")"
                ));
            }
        }
        let quoted = user.quoted();
        // A Rust effect's statements (claimonce::prelude::Tx) wait for a lock at most as long as
        // the shipped functions do (their `SET lock_timeout = '2s'`), and never longer than
        // a statement may run.
        let lock_ms = ms.min(HANDLER_LOCK_TIMEOUT_MS);
        let mut sql = format!(
            "ALTER ROLE {quoted} SET statement_timeout = '{ms}ms'; \
             ALTER ROLE {quoted} SET idle_in_transaction_session_timeout = '{ms}ms'; \
             ALTER ROLE {quoted} SET lock_timeout = '{lock_ms}ms'"
        );
        if let Some(role) = role {
            // The REVOKE runs only where the grant exists: PostgreSQL warns otherwise.
            sql.push_str(&format!(
                "; GRANT {} TO {quoted}; \
                 DO $$ BEGIN IF EXISTS (SELECT FROM pg_auth_members m \
                 JOIN pg_roles g ON g.oid = m.roleid \
                 JOIN pg_roles u ON u.oid = m.member WHERE g.rolname = 'claimonce_handler' \
                 AND u.rolname = {literal}) THEN REVOKE claimonce_handler FROM {quoted}; \
                 END IF; END $$",
                role.quoted(),
                literal = user.literal(),
            ));
        }
        client.batch_execute(&sql).await.map_err(|e| {
            format!(
                "DB_HANDLER_USERS: configuring role {user} failed: {} (the migrate user needs \
                 CREATEROLE, and on PostgreSQL 16 or later ADMIN OPTION on the role)",
                database_error(&e)
            )
        })?;
    }
    Ok(())
}

/// The roles whose members may do what no function's login may: RDS's administrators and
/// logical replication (which streams every table's changes), and PostgreSQL's predefined
/// roles that read or write every table or the server's own files and programs
/// (docs/decisions/0051).
const PRIVILEGED_ROLES: [&str; 7] = [
    "rds_superuser",
    "rds_replication",
    "pg_read_all_data",
    "pg_write_all_data",
    "pg_read_server_files",
    "pg_write_server_files",
    "pg_execute_server_program",
];

/// What makes an existing role too powerful to be a function's login: `SUPERUSER`,
/// `CREATEROLE` (unless `$2`: the migrate user's own), `CREATEDB`, `BYPASSRLS`, `REPLICATION`,
/// or membership, however indirect, in one of `$3` ([`PRIVILEGED_ROLES`]). No row for a role
/// that does not exist.
const PRIVILEGES: &str = "SELECT array_remove(ARRAY[\
     CASE WHEN r.rolsuper THEN 'SUPERUSER' END, \
     CASE WHEN r.rolcreaterole AND NOT $2 THEN 'CREATEROLE' END, \
     CASE WHEN r.rolcreatedb THEN 'CREATEDB' END, \
     CASE WHEN r.rolbypassrls THEN 'BYPASSRLS' END, \
     CASE WHEN r.rolreplication THEN 'REPLICATION' END], NULL) \
     || ARRAY(SELECT 'member of ' || g.rolname::text FROM pg_roles g \
        WHERE NOT r.rolsuper AND g.rolname = ANY($3) AND pg_has_role(r.oid, g.oid, 'MEMBER') \
        ORDER BY g.rolname) \
     FROM pg_roles r WHERE r.rolname = $1";

/// Refuses, before anything is made or granted, a function's login that names an existing
/// privileged role ([`PRIVILEGES`]): the handler and job users, and `migrate_user` (which may
/// hold `CREATEROLE`, as it is made with). Granted the IAM role, such a role would log in from
/// a function with powers no function needs. The error names the variable, the login and
/// what it holds; a role name is not a secret.
pub(crate) async fn refuse_privileged_logins(
    client: &Client,
    options: &Options,
    migrate_user: Option<&RoleName>,
) -> Result<(), String> {
    let logins = migrate_user
        .map(|u| ("DB_USER", u, true))
        .into_iter()
        .chain(
            options
                .handler_users
                .iter()
                .map(|h| ("DB_HANDLER_USERS", &h.user, false)),
        )
        .chain(
            options
                .job_users
                .iter()
                .map(|h| ("DB_JOB_USERS", &h.user, false)),
        );
    let privileged: Vec<String> = PRIVILEGED_ROLES.iter().map(|r| (*r).to_owned()).collect();
    for (variable, login, creates_roles) in logins {
        let rows = client
            .query_typed(
                PRIVILEGES,
                &[
                    (&login.0, Type::TEXT),
                    (&creates_roles, Type::BOOL),
                    (&privileged, Type::TEXT_ARRAY),
                ],
            )
            .await
            .map_err(|e| {
                format!(
                    "{variable}: looking up role {login}'s privileges: {}",
                    database_error(&e)
                )
            })?;
        let held: Vec<String> = match rows.first() {
            Some(row) => row.try_get(0).map_err(|e| {
                format!(
                    "{variable}: reading role {login}'s privileges: {}",
                    database_error(&e)
                )
            })?,
            None => Vec::new(),
        };
        if !held.is_empty() {
            return Err(format!(
                "{variable}: {login} is an existing role with {}: a function logs in as a role \
                 of its own with none of SUPERUSER, CREATEROLE, CREATEDB, BYPASSRLS, REPLICATION \
                 or membership in {}; name another login, or take these from it",
                held.join(", "),
                PRIVILEGED_ROLES.join(", "),
            ));
        }
    }
    Ok(())
}

/// Creates each handler and job user that does not exist yet, as a login with no password,
/// and grants every one of them `granted` (`rds_iam`: the user logs in with IAM tokens only).
/// Idempotent: an existing user is left as it is but for the grant, which changes nothing when
/// held. An existing privileged role is refused before anything is made
/// ([`refuse_privileged_logins`]).
async fn create_logins(
    client: &Client,
    options: &Options,
    granted: &RoleName,
) -> Result<(), String> {
    refuse_privileged_logins(client, options, None).await?;
    let users = options.handler_users.iter().chain(&options.job_users);
    for HandlerUser { user, .. } in users {
        // One statement: the DO block creates the user only when missing, so two runs at once
        // cannot both try, and a user made by hand before is kept.
        let sql = format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {literal}) THEN \
             CREATE ROLE {quoted} LOGIN; END IF; END $$; GRANT {granted} TO {quoted}",
            literal = user.literal(),
            quoted = user.quoted(),
            granted = granted.quoted(),
        );
        client.batch_execute(&sql).await.map_err(|e| {
            format!(
                "DB_CREATE_LOGINS: creating login {user} and granting it {granted} failed: {} \
                 (the migrate user needs CREATEROLE, and {granted} must exist)",
                database_error(&e)
            )
        })?;
    }
    Ok(())
}
