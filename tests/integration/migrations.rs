//! The migrations: applied by the runner once and only once, and by psql alone.

use std::process::Command;

use claimonce::migrate::{self, Migration};
use claimonce_tests::TestDb;

#[tokio::test]
async fn the_runner_applies_nothing_twice_and_refuses_an_edited_migration() {
    let db = TestDb::new().await;
    let mut client = db.client().await;
    // The template already applied everything.
    let again = migrate::apply(&mut client, claimonce_local::migrations::ALL)
        .await
        .expect("re-run");
    assert!(again.is_empty(), "{again:?}");
    let recorded = db.count("SELECT count(*) FROM schema_migrations").await;
    assert_eq!(
        recorded,
        i64::try_from(claimonce_local::migrations::ALL.len()).expect("len")
    );

    let mut edited = claimonce_local::migrations::ALL.to_vec();
    edited[0] = Migration {
        sql: "SELECT 1",
        ..edited[0]
    };
    let refused = migrate::apply(&mut client, &edited).await;
    assert!(
        matches!(refused, Err(migrate::MigrateError::Changed { version: 1 })),
        "{refused:?}"
    );

    let extra = [Migration {
        version: 99,
        name: "extra",
        sql: "CREATE TABLE extra_table (id int)",
    }];
    let mut more = claimonce_local::migrations::ALL.to_vec();
    more.extend_from_slice(&extra);
    let applied = migrate::apply(&mut client, &more).await.expect("apply new");
    assert_eq!(applied, vec![99]);
}

#[tokio::test]
async fn the_sql_files_apply_in_order_with_psql() {
    let db = TestDb::new().await;
    let client = db.client().await;
    // An empty database next to the test's own.
    let empty = format!("{}_psql", db.name);
    client
        .batch_execute(&format!("CREATE DATABASE {empty} TEMPLATE template0"))
        .await
        .expect("create");
    let url = claimonce_tests::db::with_database(&db.url, &empty);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("migrations dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort_by_key(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix('V')?.split("__").next()?.parse::<u32>().ok())
            .expect("V<n>__<name>.sql")
    });
    assert_eq!(
        files.len(),
        claimonce_local::migrations::ALL.len(),
        "every file is compiled in"
    );
    for file in &files {
        let output = Command::new("psql")
            .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &url, "-f"])
            .arg(file)
            .output()
            .expect("psql is installed");
        assert!(
            output.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let psql_db = TestDb {
        name: empty,
        function_url: url.clone(),
        url,
    };
    let tables = psql_db
        .count(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename IN \
             ('processed_events', 'customers', 'subscriptions', 'email_events', 'email_suppressions')",
        )
        .await;
    assert_eq!(tables, 5);
}
