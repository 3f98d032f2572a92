//! The Shopify receiver end to end, through the event reader the binary uses, into a real
//! PostgreSQL, as Shopify's own login: orders kept newest-first whatever the delivery order, a
//! cancellation that wins its tie and stays, an uninstalled shop, replays (under a fresh
//! webhook id, and after the ledger row was swept) that change nothing, concurrent copies
//! applied once, and the database's gate around Shopify's effects.

// A test asserts by panicking; its helpers too.
#![allow(clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use claimonce_tests::db::all_at_once;
use claimonce_tests::{TestDb, claim_call};
use shopify_webhook::Shopify;

mod common;

use common::{deliver, order, shopify};

async fn order_row(db: &TestDb, id: i64) -> (String, String) {
    let row = db
        .client()
        .await
        .query_one(
            "SELECT state, financial_status FROM shopify_orders WHERE order_id = $1",
            &[&id],
        )
        .await
        .expect("the order's row");
    (row.get(0), row.get(1))
}

#[tokio::test]
async fn orders_keep_the_newest_state_and_a_cancellation_wins_its_tie_and_stays() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(shopify());
    let (created, paid, refunded) = (
        order(1, "2026-11-30T10:00:00-05:00", false, "pending"),
        order(1, "2026-11-30T10:05:00-05:00", false, "paid"),
        order(1, "2026-11-30T10:20:00-05:00", false, "refunded"),
    );
    let cancelled_at_paid = order(1, "2026-11-30T10:05:00-05:00", true, "paid");
    // Out of order: the newer update first, then the creation, then the same-second
    // cancellation, then an update after it.
    for (topic, id, body, expected) in [
        ("orders/updated", "w1", &paid, "processed"),
        ("orders/create", "w2", &created, "processed"),
        ("orders/cancelled", "w3", &cancelled_at_paid, "processed"),
        ("orders/updated", "w4", &refunded, "processed"),
        // Shopify's retry of w1, and the same body under a fresh webhook id.
        ("orders/updated", "w1", &paid, "duplicate"),
        ("orders/updated", "w5", &paid, "duplicate"),
    ] {
        assert_eq!(
            deliver(&receiver, topic, id, body).await,
            (200, expected.to_owned()),
            "{topic} {id}"
        );
    }
    assert_eq!(
        order_row(&db, 1).await,
        ("cancelled".to_owned(), "refunded".to_owned()),
        "cancelled at its tie, and still cancelled after a later update"
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 4);
}

#[tokio::test]
async fn a_replay_after_the_sweep_changes_nothing_and_the_topic_cannot_pick_the_effect() {
    let db = TestDb::new().await;
    let (receiver, _) = db.receiver(shopify());
    let old = order(2, "2026-11-30T10:00:00-05:00", false, "pending");
    let new = order(2, "2026-11-30T11:00:00-05:00", false, "paid");
    let shop = br#"{"id":548380009,"myshopify_domain":"jsmith.myshopify.com","updated_at":"2026-11-30T12:00:00-05:00"}"#;
    let older_shop = br#"{"id":548380009,"myshopify_domain":"jsmith.myshopify.com","updated_at":"2026-11-01T12:00:00-05:00"}"#;
    for (topic, body) in [
        ("orders/create", &old[..]),
        ("orders/updated", &new[..]),
        ("app/uninstalled", &shop[..]),
    ] {
        assert_eq!(
            deliver(&receiver, topic, "first", body).await,
            (200, "processed".into())
        );
    }
    let timeline = "SELECT count(*) FROM shopify_order_events WHERE order_id = 2";
    assert_eq!(db.count(timeline).await, 2);
    // The ledger swept, as after the retention window; the old bodies come again.
    db.client()
        .await
        .batch_execute("DELETE FROM processed_events")
        .await
        .expect("sweep");
    for (topic, body) in [
        ("orders/updated", &old[..]),
        ("app/uninstalled", &older_shop[..]),
    ] {
        assert_eq!(
            deliver(&receiver, topic, "replayed", body).await,
            (200, "processed".into())
        );
    }
    assert_eq!(
        order_row(&db, 2).await,
        ("open".to_owned(), "paid".to_owned())
    );
    assert_eq!(
        db.count(timeline).await,
        2,
        "the replayed event's timeline row is not added again"
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM shopify_shops WHERE uninstalled_at = '2026-11-30T17:00:00Z'"
        )
        .await,
        1,
        "the uninstall time never moves back"
    );
    // Under a topic its body contradicts, a body is refused and writes nothing.
    let before = db.count("SELECT count(*) FROM processed_events").await;
    for (topic, body) in [
        ("app/uninstalled", &new[..]),
        ("orders/updated", &shop[..]),
        ("orders/cancelled", &new[..]),
    ] {
        assert_eq!(
            deliver(&receiver, topic, "relabelled", body).await,
            (400, "invalid-payload".into()),
            "{topic}"
        );
    }
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events").await,
        before
    );
}

#[tokio::test]
async fn two_copies_at_once_apply_once_and_what_cannot_succeed_writes_nothing() {
    let db = TestDb::new().await;
    let body = order(3, "2026-11-30T10:00:00-05:00", false, "paid");
    let environments = (0..4).map(|_| db.receiver(shopify()).0).collect();
    let shared = body.clone();
    let answers = all_at_once(environments, move |r| {
        let body = shared.clone();
        async move { deliver(&r, "orders/create", "w-concurrent", &body).await }
    })
    .await;
    let processed = answers.iter().filter(|a| a.1 == "processed").count();
    assert_eq!(processed, 1, "{answers:?}");
    assert_eq!(db.count("SELECT count(*) FROM shopify_orders").await, 1);

    let (receiver, _) = db.receiver(shopify());
    let other = Shopify::new(&["another-secret"]).expect("secret");
    let (stranger, _) = db.receiver(other);
    let fresh = order(4, "2026-11-30T10:00:00-05:00", false, "paid");
    assert_eq!(
        deliver(&stranger, "orders/create", "w-bad", &fresh).await,
        (400, "signature-mismatch".into())
    );
    assert_eq!(
        deliver(&receiver, "orders/create", "w-bad", b"{\"id\":4}").await,
        (400, "invalid-payload".into())
    );
    assert_eq!(db.count("SELECT count(*) FROM processed_events").await, 1);
    assert_eq!(db.count("SELECT count(*) FROM shopify_orders").await, 1);
}

/// The SQLSTATE of `sql` run as a login of `role`, or "ok".
async fn as_login(db: &TestDb, role: &str, sql: &str) -> String {
    let url = claimonce_tests::roles::login_with(db, role).await;
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    claimonce_tests::db::sqlstate(&client, sql).await
}

#[tokio::test]
async fn the_database_gates_shopifys_effects_as_it_gates_the_others() {
    let db = TestDb::new().await;
    let keep = "SELECT shopify_keep_order_v1(9, 'open', '2026-11-30T10:00:00Z', 0::smallint, \
                NULL, NULL, '1', 'USD')";
    for (role, sql) in [
        // No claim won in this transaction.
        ("claimonce_shopify", keep.to_owned()),
        (
            "claimonce_shopify",
            "SELECT shopify_mark_uninstalled_v1(1, 'x.myshopify.com', '2026-11-30T10:00:00Z')"
                .to_owned(),
        ),
        // No table of its own to write directly.
        (
            "claimonce_shopify",
            "INSERT INTO shopify_orders (order_id, state, source_updated_at, source_rank) \
             VALUES (9, 'open', now(), 0)"
                .to_owned(),
        ),
        // Its own claim won, another provider's effect; another provider's login, Shopify's.
        (
            "claimonce_shopify",
            format!(
                "BEGIN; {}; SELECT stripe_credit_v1('cus_x', NULL, 1000000); COMMIT",
                claim_call("shopify", "b1", "orders/create")
            ),
        ),
        (
            "claimonce_github",
            format!(
                "BEGIN; {}; {keep}; COMMIT",
                claim_call("github", "b2", "issues")
            ),
        ),
        (
            "claimonce_github",
            claim_call("shopify", "b3", "orders/create"),
        ),
    ] {
        assert_eq!(as_login(&db, role, &sql).await, "42501", "{role}: {sql}");
    }
    assert_eq!(
        db.count(
            "SELECT (SELECT count(*) FROM shopify_orders) + (SELECT count(*) FROM processed_events)"
        )
        .await,
        0
    );
    // Under its own won claim, Shopify's login runs its effect.
    assert_eq!(
        as_login(
            &db,
            "claimonce_shopify",
            &format!(
                "BEGIN; {}; {keep}; COMMIT",
                claim_call("shopify", "b4", "orders/create")
            )
        )
        .await,
        "ok"
    );
    assert_eq!(db.count("SELECT count(*) FROM shopify_orders").await, 1);
}
