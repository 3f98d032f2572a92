//! Lists `migrations/` for the migrate binary ([`slack_webhook::MIGRATIONS`]): adding a
//! migration is adding its file, as in claimonce's own repository.

fn main() -> Result<(), String> {
    claimonce_registry::embed_crate_migrations()
}
