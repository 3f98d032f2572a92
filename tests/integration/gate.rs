//! The claim gate as the database enforces it (migration V9), tried as an attacker holding a
//! function's own login: no effect without a claim its own transaction won, no direct write to
//! any table, no temporary shadow of the ledger, no other provider's claims or effects. And the
//! same logins deliver normally.

use claimonce::jobs::CLAIM_FUNCTION;
use claimonce_tests::apigw::{outcome, post_stripe, post_to};
use claimonce_tests::db::receiver_at;
use claimonce_tests::db::sqlstate;
use claimonce_tests::roles::login_with;
use claimonce_tests::sign::{
    RESEND_SECRET, invoice_paid, now, resend, resend_email, stripe, svix_headers,
};
use claimonce_tests::{TestDb, claim_call};
use tokio_postgres::{Client, NoTls};

/// Insufficient privilege: what every refusal below answers.
const DENIED: &str = "42501";

/// A session as a login granted `role` only.
async fn session_as(db: &TestDb, role: &str) -> Client {
    let url = login_with(db, role).await;
    let (client, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect as a {role} login: {e}"));
    tokio::spawn(connection);
    client
}

/// Every row of every table a function login could want to change, counted.
async fn rows_everywhere(db: &TestDb) -> i64 {
    db.count(
        "SELECT (SELECT count(*) FROM processed_events) + (SELECT count(*) FROM outbox) \
         + (SELECT count(*) FROM customers) + (SELECT count(*) FROM subscriptions) \
         + (SELECT count(*) FROM email_events) + (SELECT count(*) FROM email_suppressions) \
         + (SELECT count(*) FROM github_installations) \
         + (SELECT count(*) FROM github_installation_repositories)",
    )
    .await
}

const STRIPE_EFFECTS: [&str; 3] = [
    "SELECT stripe_credit_v1('cus_x', NULL, 1000000)",
    "SELECT stripe_provision_v2('cus_x', 'x@example.com', 'evt_x')",
    "SELECT stripe_keep_subscription_v2('sub_x', 'cus_x', 'active', 1, 1::smallint)",
];
const RESEND_EFFECTS: [&str; 2] = [
    "SELECT resend_record_v1('msg_x', 'em_x', 'email.bounced', '{x@example.com}', \
     '2026-11-30T00:00:00Z', 'bounced')",
    "SELECT resend_record_v2('msg_x', 'em_x', 'email.bounced', '{x@example.com}', \
     '2026-11-30T00:00:00Z', 'bounced')",
];
const GITHUB_EFFECTS: [&str; 4] = [
    "SELECT github_keep_installation_v1(1, 'octo', 2, 'all', 'active', '2026-11-30T00:00:00Z', \
     0::smallint, '{}', '{}', '{}')",
    "SELECT github_keep_installation_v2(1, 'octo', 2, 'all', 'active', '2026-11-30T00:00:00Z', \
     0::smallint, '{}', '{}', '{}')",
    "SELECT claimonce_forward_v1('github', 'body_x', 'github.issues', '{}')",
    "SELECT claimonce_forward_v2('github', 'body_x', 'github.issues', '{}', NULL, NULL)",
];

#[tokio::test]
async fn an_effect_without_a_claim_this_transaction_won_is_refused_and_writes_nothing() {
    let db = TestDb::new().await;
    for (role, provider, effects) in [
        ("claimonce_stripe", "stripe", &STRIPE_EFFECTS[..]),
        ("claimonce_resend", "resend", &RESEND_EFFECTS[..]),
        ("claimonce_github", "github", &GITHUB_EFFECTS[..]),
    ] {
        let login = session_as(&db, role).await;
        for effect in effects {
            // Called on its own: the review's `stripe_credit_v1(...)` twice credited 2,000,000.
            assert_eq!(sqlstate(&login, effect).await, DENIED, "{role}: {effect}");
            // Under a claim won by an earlier transaction, with the transaction-local setting
            // that names its ledger row forged: the row is not this transaction's.
            assert_eq!(
                sqlstate(&login, &claim_call(provider, "evt_earlier", "t")).await,
                "ok",
                "{role}"
            );
            let row: String = db
                .client()
                .await
                .query_one(
                    "SELECT ctid::text FROM processed_events \
                     WHERE provider = $1 AND event_id = 'evt_earlier'",
                    &[&provider],
                )
                .await
                .expect("the earlier claim's row")
                .get(0);
            let forged = format!(
                "BEGIN; SELECT set_config('claimonce.claim', '{row}', true); {effect}; COMMIT"
            );
            assert_eq!(sqlstate(&login, &forged).await, DENIED, "{role}: {forged}");
            login
                .batch_execute("ROLLBACK")
                .await
                .expect("end the failed one");
        }
    }
    // Only the three claims of evt_earlier were written: no effect row, nothing credited.
    assert_eq!(rows_everywhere(&db).await, 3);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id = 'evt_earlier'")
            .await,
        3
    );
}

/// Credits 1,000 cents to `cus_rearm`: the effect the tests below call twice.
const CREDIT: &str = "SELECT stripe_credit_v1('cus_rearm', NULL, 1000)";

/// The one transaction of a login that wins the claim of `event`, runs `first`, names the same
/// ledger row again (the setting anyone may set, saved under another name) and runs `second`.
fn rearmed(event: &str, first: &str, second: &str) -> String {
    format!(
        "BEGIN; {}; \
         SELECT set_config('attack.row', current_setting('claimonce.claim'), true); \
         {first}; \
         SELECT set_config('claimonce.claim', current_setting('attack.row'), true); \
         {second}; COMMIT",
        claim_call("stripe", event, "t")
    )
}

#[tokio::test]
async fn one_claim_drives_one_effect_call_even_with_its_setting_forged_again() {
    let db = TestDb::new().await;
    let login = session_as(&db, "claimonce_stripe").await;
    let credited = || async {
        db.count(
            "SELECT coalesce(sum(credit_balance_cents), 0)::bigint FROM customers \
             WHERE stripe_customer_id = 'cus_rearm'",
        )
        .await
    };
    // The transaction up to the second call is valid as written: the claim is won, the first
    // effect applies, and setting the claim's name again is allowed. The gate of V9 applied
    // the second call too (2,000 credited under one ledger row).
    assert_eq!(
        sqlstate(&login, &rearmed("evt_once", CREDIT, "SELECT 1")).await,
        "ok"
    );
    assert_eq!(credited().await, 1000);
    for (event, first) in [
        // Straight after the first effect.
        ("evt_again", CREDIT.to_owned()),
        // The first effect in a savepoint that was kept.
        ("evt_kept", format!("SAVEPOINT s; {CREDIT}; RELEASE s")),
        // The first effect in a savepoint rolled back: the claim stays spent, with nothing
        // applied (the attacker only loses the event).
        (
            "evt_undone",
            format!("SAVEPOINT s; {CREDIT}; ROLLBACK TO s"),
        ),
        // A forward takes the claim as any effect does.
        (
            "evt_forwarded",
            "SELECT claimonce_forward_v2('stripe', 'evt_forwarded', 'stripe.x', '{}', NULL, NULL)"
                .to_owned(),
        ),
    ] {
        let sql = rearmed(event, &first, CREDIT);
        let refused = login.batch_execute(&sql).await.expect_err(&sql);
        let db_error = refused.as_db_error().expect("the server's refusal");
        assert_eq!(db_error.code().code(), DENIED, "{sql}");
        // Refused by the second effect's take, not by the first call or anything else.
        let context = db_error.where_().unwrap_or_default();
        assert!(
            db_error.message().contains("no effect took")
                && context.contains("claimonce_take_claim_v1")
                && context.contains("stripe_credit_v1")
                && !context.contains("claimonce_forward_v2"),
            "{sql}: refused elsewhere: {} / {context}",
            db_error.message()
        );
        login.batch_execute("ROLLBACK").await.expect("end it");
    }
    // The forward's positive control: a forward alone under its claim writes its row.
    assert_eq!(
        sqlstate(
            &login,
            &rearmed(
                "evt_forward_alone",
                "SELECT claimonce_forward_v2('stripe', 'evt_forward_alone', 'stripe.x', '{}', \
                 NULL, NULL)",
                "SELECT 1"
            )
        )
        .await,
        "ok"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM outbox WHERE event_id = 'evt_forward_alone'")
            .await,
        1
    );
    assert_eq!(credited().await, 1000, "nothing but the first transaction");
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events").await,
        2,
        "the refused transactions left no claim (the credit's and the forward's alone)"
    );
}

/// An effect that writes an event's id writes its own claim's: as Resend's login, claiming
/// message A and recording message B is refused with nothing written (neither B's row nor its
/// suppression), and so is a Stripe welcome under another event's id; the same calls with the
/// claim's own id apply (the positive control).
#[tokio::test]
async fn an_effect_writes_the_event_of_the_claim_it_runs_under_and_no_other() {
    let db = TestDb::new().await;
    let record = |id: &str| {
        format!(
            "SELECT resend_record_v2('{id}', 'em_b', 'email.bounced', '{{b@example.com}}', \
             '2026-11-30T00:00:00Z', 'bounced')"
        )
    };
    let provision =
        |id: &str| format!("SELECT stripe_provision_v2('cus_w', 'w@example.com', '{id}')");
    for (role, provider, effect) in [
        (
            "claimonce_resend",
            "resend",
            &record as &dyn Fn(&str) -> String,
        ),
        ("claimonce_stripe", "stripe", &provision),
    ] {
        let login = session_as(&db, role).await;
        let before = rows_everywhere(&db).await;
        let under_a = |written: &str| {
            format!(
                "BEGIN; {}; {}; COMMIT",
                claim_call(provider, "msg_a", "t"),
                effect(written)
            )
        };
        let refused = login
            .batch_execute(&under_a("msg_b"))
            .await
            .expect_err("another event's id");
        assert_eq!(refused.code().map(|c| c.code()), Some(DENIED), "{role}");
        assert!(
            refused.as_db_error().is_some_and(|e| e
                .message()
                .contains("writes the event of the claim it runs under")),
            "{role}: refused by the effect's own check: {refused:?}"
        );
        login.batch_execute("ROLLBACK").await.expect("end it");
        assert_eq!(
            rows_everywhere(&db).await,
            before,
            "{role}: nothing written"
        );
        assert_eq!(sqlstate(&login, &under_a("msg_a")).await, "ok", "{role}");
        db.client()
            .await
            .batch_execute("DELETE FROM processed_events")
            .await
            .expect("the claim again, for the next login");
    }
    assert_eq!(
        db.count(
            "SELECT (SELECT count(*) FROM email_events WHERE event_id = 'msg_a') \
             + (SELECT count(*) FROM email_suppressions WHERE source_event_id = 'msg_a') \
             + (SELECT count(*) FROM outbox WHERE event_id = 'msg_a')"
        )
        .await,
        3,
        "under its own claim each applied"
    );
}

#[tokio::test]
async fn a_function_login_writes_no_table_directly() {
    let db = TestDb::new().await;
    for role in claimonce_local::functions::all()
        .expect("the registry")
        .iter()
        .map(|f| format!("claimonce_{}", f.provider))
    {
        let login = session_as(&db, &role).await;
        for sql in [
            // A pre-claim: the real delivery would answer duplicate and never be applied.
            "INSERT INTO processed_events (provider, event_id, event_type) \
             VALUES ('stripe', 'evt_real', 't')",
            "DELETE FROM processed_events",
            "UPDATE customers SET credit_balance_cents = 42",
            "INSERT INTO customers (stripe_customer_id) VALUES ('cus_x')",
            "INSERT INTO subscriptions (stripe_subscription_id, status, event_created) \
             VALUES ('sub_x', 'active', now())",
            "INSERT INTO email_suppressions (email, reason, source_event_id) \
             VALUES ('x@example.com', 'r', 'e')",
            "DELETE FROM email_suppressions",
            "INSERT INTO email_events (event_id, event_type) VALUES ('msg_x', 'email.sent')",
            "INSERT INTO github_installations VALUES (1, 'o', 2, 'all', 'active', now(), 0)",
            "UPDATE github_installation_repositories SET present = true",
            "INSERT INTO outbox (topic, payload, provider, event_id) \
             VALUES ('email.welcome', '{}', 'stripe', 'evt_x')",
            "SELECT claimonce_take_claim_v1('stripe')",
        ] {
            assert_eq!(sqlstate(&login, sql).await, DENIED, "{role}: {sql}");
        }
    }
    assert_eq!(rows_everywhere(&db).await, 0);
}

#[tokio::test]
async fn a_temporary_shadow_of_the_ledger_is_refused_and_could_not_shadow_it_anyway() {
    let db = TestDb::new().await;
    // The TEMP privilege is the database's own, revoked by V9 on the database it migrates
    // (a copy of a template does not carry it).
    let deployed = db.migrated_beside("temp", "SELECT 1").await;
    let login = session_as(&deployed, "claimonce_stripe").await;
    assert_eq!(
        sqlstate(
            &login,
            "CREATE TEMP TABLE processed_events (provider text, event_id text, event_type text, \
             payload_sha256 bytea, UNIQUE (provider, event_id))"
        )
        .await,
        DENIED
    );
    // A session that may create one (the owner) still cannot shadow the ledger for the claim:
    // every function searches pg_temp last.
    let owner = deployed.client().await;
    owner
        .batch_execute(&format!(
            "{}; \
             CREATE TEMP TABLE processed_events (provider text, event_id text, event_type text, \
             payload_sha256 bytea, UNIQUE (provider, event_id)); \
             SET search_path = pg_temp, public",
            claim_call("stripe", "evt_claimed", "t")
        ))
        .await
        .expect("a temporary table of the owner's");
    let won: bool = owner
        .query_one(
            &format!("SELECT won FROM public.{CLAIM_FUNCTION}('stripe', 'evt_claimed', 't', NULL)"),
            &[],
        )
        .await
        .expect("claim again")
        .get(0);
    assert!(
        !won,
        "the claim read the real ledger, not the shadow: a duplicate"
    );
}

#[tokio::test]
async fn one_providers_login_can_neither_claim_nor_apply_for_another() {
    let db = TestDb::new().await;
    // One transaction: the claim of `provider`'s `event`, then `then`.
    let claimed = |provider: &str, event: &str, event_type: &str, then: &str| {
        format!(
            "BEGIN; {}; {then}; COMMIT",
            claim_call(provider, event, event_type)
        )
    };
    // GitHub's login winning its own claim of an `issues` event, then running `then`.
    let own = |event: &str, then: &str| claimed("github", event, "issues", then);
    let github = session_as(&db, "claimonce_github").await;
    for sql in [
        claim_call("stripe", "evt_1", "invoice.paid"),
        claim_call("resend", "msg_1", "email.sent"),
        // Its own claim won, another provider's effect.
        own("body_1", "SELECT stripe_credit_v1('cus_x', NULL, 1000000)"),
        // Its own claim won, a forward tagged as another provider's event.
        own(
            "body_2",
            "SELECT claimonce_forward_v1('stripe', 'body_2', 'stripe.x', '{}')",
        ),
        // Its own claim won, a forward under another of its own events' identity.
        own(
            "body_3",
            "SELECT claimonce_forward_v1('github', 'body_other', 'github.issues', '{}')",
        ),
        // The same two through the forward that keeps the signed bytes.
        own(
            "body_4",
            "SELECT claimonce_forward_v2('stripe', 'body_4', 'stripe.x', '{}', NULL, NULL)",
        ),
        own(
            "body_5",
            "SELECT claimonce_forward_v2('github', 'body_other', 'github.issues', '{}', NULL, \
             NULL)",
        ),
        // Its own claim and identity, another provider's topic: the relay would hand a
        // customer's payload to Stripe's welcome-mail consumer.
        own(
            "body_6",
            "SELECT claimonce_forward_v2('github', 'body_6', 'email.welcome', '{}', NULL, NULL)",
        ),
        own(
            "body_7",
            "SELECT claimonce_forward_v1('github', 'body_7', 'stripe.invoice', '{}')",
        ),
        own(
            "body_8",
            "SELECT claimonce_forward_v2('github', 'body_8', 'githubx.issues', '{}', NULL, NULL)",
        ),
    ] {
        assert_eq!(sqlstate(&github, &sql).await, DENIED, "{sql}");
        github.batch_execute("ROLLBACK").await.expect("end it");
    }
    let stripe_login = session_as(&db, "claimonce_stripe").await;
    for sql in [
        claimed(
            "stripe",
            "evt_2",
            "t",
            "SELECT github_keep_installation_v1(1, 'o', 2, 'all', 'active', \
             '2026-11-30T00:00:00Z', 0::smallint, '{}', '{}', '{}')",
        ),
        claimed(
            "stripe",
            "evt_3",
            "t",
            "SELECT resend_record_v2('m', 'e', 'email.sent', '{}', '2026-11-30T00:00:00Z', NULL)",
        ),
    ] {
        assert_eq!(sqlstate(&stripe_login, &sql).await, DENIED, "{sql}");
        stripe_login
            .batch_execute("ROLLBACK")
            .await
            .expect("end it");
    }
    assert_eq!(rows_everywhere(&db).await, 0);
}

#[tokio::test]
async fn each_provider_delivers_as_its_own_login() {
    let db = TestDb::new().await;
    let stripe_url = login_with(&db, "claimonce_stripe").await;
    let (receiver, _) = receiver_at(&stripe_url, stripe());
    let body = invoice_paid("evt_own", "cus_own", 700);
    let answers = [
        outcome(&post_stripe(&receiver, &body).await),
        outcome(&post_stripe(&receiver, &body).await),
    ];
    assert_eq!(
        answers,
        [(200, "processed".into()), (200, "duplicate".into())]
    );
    assert_eq!(
        db.count("SELECT credit_balance_cents FROM customers WHERE stripe_customer_id = 'cus_own'")
            .await,
        700
    );

    let resend_url = login_with(&db, "claimonce_resend").await;
    let (receiver, _) = receiver_at(&resend_url, resend());
    let body = resend_email("bounced", "em_own", &["own@example.com"]);
    let headers = svix_headers("svix", RESEND_SECRET, "msg_own", now(), &body);
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let answer = post_to(&receiver, "/webhooks/resend", &headers, &body).await;
    assert_eq!(outcome(&answer), (200, "processed".into()));
    assert_eq!(
        db.count("SELECT count(*) FROM email_suppressions WHERE email = 'own@example.com'")
            .await,
        1
    );

    // A Stripe login cannot deliver Resend's events: the claim refuses, nothing is written,
    // and the answer is a 500 (a misconfigured deployment, not the sender's fault).
    let (wrong, _) = receiver_at(&stripe_url, resend());
    let headers = svix_headers("svix", RESEND_SECRET, "msg_wrong", now(), &body);
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let answer = post_to(&wrong, "/webhooks/resend", &headers, &body).await;
    assert_eq!(answer.status().as_u16(), 500);
    assert_eq!(
        db.count("SELECT count(*) FROM processed_events WHERE event_id = 'msg_wrong'")
            .await,
        0
    );
}

#[tokio::test]
async fn every_shipped_function_pins_its_search_path_and_bounds_its_lock_wait() {
    let db = TestDb::new().await;
    db.direct_because("reads the catalog; nothing under test connects");
    let client = db.client().await;
    let rows = client
        .query(
            "SELECT p.proname, p.prosecdef, coalesce(p.proconfig, '{}') \
             FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
             WHERE n.nspname = 'public' ORDER BY p.proname",
            &[],
        )
        .await
        .expect("the schema's functions");
    // Every function of the schema, a provider crate's own migrations' included, carries the
    // settings: no pinned list, so a new provider's effects are held to them with no edit here.
    let names: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    for shared in [
        CLAIM_FUNCTION,
        "claimonce_forward_v1",
        "claimonce_forward_v2",
        "claimonce_take_claim_v1",
        "stripe_credit_v1",
        "resend_record_v2",
        "github_keep_installation_v2",
    ] {
        assert!(names.iter().any(|n| n == shared), "{shared}: {names:?}");
    }
    for row in &rows {
        let name: String = row.get(0);
        let definer: bool = row.get(1);
        let config: Vec<String> = row.get(2);
        assert!(
            config.contains(&"search_path=pg_catalog, public, pg_temp".to_owned()),
            "{name}: {config:?}"
        );
        if name == "claimonce_take_claim_v1" {
            // Called only from inside the effects, under their owner's rights and bounds.
            assert!(!definer, "{name}");
            continue;
        }
        assert!(definer, "{name} runs with its owner's rights");
        assert!(
            config.contains(&"lock_timeout=2s".to_owned()),
            "{name}: {config:?}"
        );
    }
}

#[tokio::test]
async fn both_releases_forward_and_relay_while_v12_rolls_out() {
    let db = TestDb::new().await;
    let github = session_as(&db, "claimonce_github").await;
    let signed = "{\"b\":1,  \"a\":2}\n";
    // The previous release's receiver (forward_v1) and this one's (forward_v2), side by side.
    github
        .batch_execute(&format!(
            "BEGIN; {}; \
             SELECT claimonce_forward_v1('github', 'body_old', 'github.issues', '{signed}'); \
             COMMIT; \
             BEGIN; {}; \
             SELECT claimonce_forward_v2('github', 'body_new', 'github.issues', '{signed}', \
             'X-Hub-Signature-256', 'sha256=00'); COMMIT",
            claim_call("github", "body_old", "issues"),
            claim_call("github", "body_new", "issues"),
        ))
        .await
        .expect("both forwards are open to the github login");
    // The previous release's relay reads `payload` of both rows, as it always did.
    let relay = session_as(&db, "claimonce_relay").await;
    let old: Vec<(String, String)> = relay
        .query(
            "SELECT event_id, payload::text FROM outbox WHERE dispatched_at IS NULL ORDER BY id",
            &[],
        )
        .await
        .expect("the previous relay's read")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        old,
        [
            ("body_old".to_owned(), r#"{"a": 2, "b": 1}"#.to_owned()),
            ("body_new".to_owned(), r#"{"a": 2, "b": 1}"#.to_owned()),
        ]
    );
    // This release's relay sends the signed bytes where the row has them, the envelope where
    // a previous receiver wrote none.
    let rows: Vec<(Option<String>, Option<String>)> = relay
        .query("SELECT body, signature FROM outbox ORDER BY id", &[])
        .await
        .expect("the new columns are the relay's to read")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        rows,
        [
            (None, None),
            (Some(signed.to_owned()), Some("sha256=00".to_owned()))
        ]
    );
}
