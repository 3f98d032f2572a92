//! The first login (the quick start's): once per run, before the migrations, the migrate
//! function logs in to the cluster's writer endpoint as its master user (the RDS-managed master
//! secret, TLS verified against the Amazon RDS certificate bundle carried in this binary) and
//! makes what an IAM-only RDS Proxy needs to exist: the migrate user itself and the functions'
//! logins, each granted `rds_iam`. Everything after it goes through the proxy with IAM tokens,
//! so no login depends on a secret-backed user behind an `IAM_AUTH` proxy
//! (decision 0043).
//!
//! A login that names the master, or an existing privileged role (`SUPERUSER`, `CREATEROLE`
//! but for the migrate user, `CREATEDB`, `BYPASSRLS`, `REPLICATION`, a member of
//! `rds_superuser`: docs/decisions/0051), is refused before anything is made.
//!
//! What the master does, all idempotent (a second run finds everything and changes nothing):
//! - creates the migrate user (`DB_USER`) when missing, `LOGIN CREATEROLE`, no password, and
//!   grants it the IAM role (`DB_CREATE_LOGINS`, `rds_iam`);
//! - hands it the database (`ALTER DATABASE … OWNER TO`), so the migrations it runs may revoke
//!   `CREATE` on `public` and `TEMPORARY` on the database, which only the owner can;
//! - creates each handler and job login when missing, grants it the IAM role, and grants it to
//!   the migrate user `WITH ADMIN OPTION`: on PostgreSQL 16 a role's login defaults (`ALTER ROLE
//!   … SET`) may be set only by a holder of that option, and the master made the logins.

use std::path::Path;

use claimonce::config;
use claimonce::db::{Settings, Timeouts, Trust};
use claimonce::prelude::ConfigError;
use tokio_postgres::Client;

use crate::{HandlerUser, Options, RoleName, database_error};

/// The Amazon RDS certificate bundle: the root CAs of every region that a cluster's own
/// endpoints chain to (<https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem>,
/// the expired ones left out). RDS Proxy's certificates come from ACM and chain to the public
/// roots instead, which is why only this first login uses it.
pub const RDS_CA_BUNDLE: &[u8] = include_bytes!("../rds-ca-bundle.pem");

/// The master's login to the writer endpoint, and the migrate user it makes.
#[derive(Debug)]
pub struct Bootstrap {
    master: Settings,
    migrate_user: RoleName,
}

impl Bootstrap {
    /// A bootstrap that logs in with `master` and makes `migrate_user`.
    pub fn new(master: Settings, migrate_user: RoleName) -> Self {
        Self {
            master,
            migrate_user,
        }
    }

    /// From the environment: `DB_BOOTSTRAP_HOST` (the cluster's writer endpoint; unset: no
    /// bootstrap) with `DB_BOOTSTRAP_SECRET_ARN` (the master user's secret), `DB_PORT`,
    /// `DB_NAME`, `DB_USER` (the migrate user to make) and optionally
    /// `DB_BOOTSTRAP_SSLROOTCERT` (a PEM bundle to trust instead of [`RDS_CA_BUNDLE`]).
    pub async fn from_env(timeouts: Timeouts) -> Result<Option<Self>, ConfigError> {
        let Some(host) = config::optional("DB_BOOTSTRAP_HOST") else {
            return Ok(None);
        };
        let arn = config::required("DB_BOOTSTRAP_SECRET_ARN")?;
        let port = u16::try_from(config::number("DB_PORT", 5432)?)
            .map_err(|_| ConfigError::new("DB_PORT must be a port number".into()))?;
        let dbname = config::required("DB_NAME")?;
        let migrate_user = RoleName::parse(&config::required("DB_USER")?).map_err(|e| {
            ConfigError::new(e.to_string().replacen("DB_HANDLER_USERS", "DB_USER", 1))
        })?;
        let root = config::optional("DB_BOOTSTRAP_SSLROOTCERT");
        let trust = root
            .as_deref()
            .map_or(Trust::Pem(RDS_CA_BUNDLE), |p| Trust::PemFile(Path::new(p)));
        let aws = claimonce::jobs::aws_config().load().await;
        let master = Settings::with_secret(&host, port, &dbname, aws, &arn, trust, timeouts)
            .await
            .map_err(|e| {
                ConfigError::new(
                    e.to_string()
                        .replace("DB_SECRET_ARN", "DB_BOOTSTRAP_SECRET_ARN"),
                )
            })?;
        Ok(Some(Self::new(master, migrate_user)))
    }

    /// Logs in as the master and makes the migrate user and the logins `options` names. The
    /// IAM role is `options.create_logins`, which a bootstrap needs (the logins it makes have no
    /// password).
    pub async fn run(&self, options: &Options) -> Result<(), String> {
        let granted = options.create_logins.as_ref().ok_or(
            "DB_BOOTSTRAP_HOST needs DB_CREATE_LOGINS (rds_iam): the logins it makes log in with \
             IAM tokens alone",
        )?;
        let client = self
            .master
            .connect()
            .await
            .map_err(|e| format!("DB_BOOTSTRAP_HOST: the master user's login failed: {e}"))?;
        let master = current_user(&client).await?;
        let logins: Vec<&HandlerUser> = options
            .handler_users
            .iter()
            .chain(&options.job_users)
            .collect();
        if let Some(clash) = std::iter::once(&self.migrate_user)
            .chain(logins.iter().map(|l| &l.user))
            .find(|u| u.to_string() == master)
        {
            return Err(format!(
                "{clash} is the master user: the migrate function and the receivers each log in \
                 as a user of their own"
            ));
        }
        crate::logins::refuse_privileged_logins(&client, options, Some(&self.migrate_user)).await?;
        let migrate = self.migrate_user.quoted();
        let mut sql = format!(
            "{create}; GRANT {granted} TO {migrate}; GRANT {migrate} TO CURRENT_USER; \
             DO $$ BEGIN EXECUTE format('ALTER DATABASE %I OWNER TO %I', current_database(), \
             {literal}); END $$",
            create = create_if_missing(&self.migrate_user, "LOGIN CREATEROLE"),
            granted = granted.quoted(),
            literal = self.migrate_user.literal(),
        );
        for HandlerUser { user, .. } in logins {
            let quoted = user.quoted();
            sql.push_str(&format!(
                "; {create}; GRANT {granted} TO {quoted}; GRANT {quoted} TO {migrate} WITH ADMIN OPTION",
                create = create_if_missing(user, "LOGIN"),
                granted = granted.quoted(),
            ));
        }
        client.batch_execute(&sql).await.map_err(|e| {
            format!(
                "DB_BOOTSTRAP_HOST: making {} and the logins as the master user failed: {} ({granted} \
                 must exist)",
                self.migrate_user,
                database_error(&e)
            )
        })
    }
}

/// One statement that creates `role` with `attributes` only when it does not exist, so two runs
/// at once cannot both try and a role made by hand before is kept.
fn create_if_missing(role: &RoleName, attributes: &str) -> String {
    format!(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = {literal}) THEN \
         CREATE ROLE {quoted} {attributes}; END IF; END $$",
        literal = role.literal(),
        quoted = role.quoted(),
    )
}

async fn current_user(client: &Client) -> Result<String, String> {
    client
        .query_typed("SELECT current_user::text", &[])
        .await
        .ok()
        .and_then(|rows| rows.first().map(|row| row.get::<_, String>(0)))
        .ok_or_else(|| "DB_BOOTSTRAP_HOST: reading the master user's name failed".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    /// Three roots (RSA2048, RSA4096, ECC384) for each of about thirty regions: a bundle cut
    /// short, or one file of another kind, shows here before a deploy does.
    #[test]
    fn the_rds_bundle_carried_in_the_binary_holds_every_region_s_roots() {
        let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(RDS_CA_BUNDLE).collect();
        let certs = certs.expect("every block a certificate");
        assert!(certs.len() >= 80, "{} certificates", certs.len());
        let text = String::from_utf8_lossy(RDS_CA_BUNDLE);
        assert_eq!(
            text.matches("-----BEGIN CERTIFICATE-----").count(),
            certs.len()
        );
    }
}
