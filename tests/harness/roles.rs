//! Login users for the project's database roles, as DEPLOY.md tells an operator to create
//! them (`CREATE USER … ; GRANT claimonce_<role> TO …`), so a test can run code with exactly
//! one role's privileges instead of the superuser's.

use crate::TestDb;

/// `url` with its user replaced by `user` (the harness's servers trust loopback logins).
pub fn url_as(url: &str, user: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let host = rest.find('@').map_or(rest, |at| &rest[at + 1..]);
    format!("{}{user}@{host}", &url[..scheme_end])
}

/// The name of the test database `db`'s login for `role` (`claimonce_stripe` or `stripe`:
/// `<db>_stripe`). Roles are per server, so the login is named after the test database.
pub fn login_name(db: &str, role: &str) -> String {
    format!("{db}_{}", role.trim_start_matches("claimonce_"))
}

/// Creates a login user granted `role` (roles are per server, so the user is named after
/// the test database), unless it exists, and returns a URL to the test database as that user,
/// the way the code under test connects: through PgBouncer in the pooled pass.
pub async fn login_with(db: &TestDb, role: &str) -> String {
    let user = login_name(&db.name, role);
    db.client()
        .await
        .batch_execute(&format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{user}') THEN \
             CREATE ROLE {user} LOGIN IN ROLE {role}; END IF; END $$"
        ))
        .await
        .unwrap_or_else(|e| panic!("create login {user}: {e}"));
    url_as(db.function_url(), &user)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_of_a_url_is_replaced() {
        assert_eq!(
            url_as("postgres://postgres@127.0.0.1:5/db?sslmode=disable", "fn"),
            "postgres://fn@127.0.0.1:5/db?sslmode=disable"
        );
        assert_eq!(url_as("postgres://u:pw@h/db", "fn"), "postgres://fn@h/db");
        assert_eq!(url_as("postgres://h/db", "fn"), "postgres://fn@h/db");
    }
}
