//! The one thing read from a receiver's `main.rs` source text: the constructor it hands to
//! `claimonce::run_from_env`.

/// The argument of a `main.rs`'s one `claimonce::run_from_env(<constructor>)` call.
pub(crate) fn constructor(source: &str) -> Option<String> {
    let (_, after) = source.split_once("claimonce::run_from_env(")?;
    let (argument, _) = after.split_once(')')?;
    let argument = argument.trim().trim_end_matches(',').trim();
    let plain = !argument.is_empty()
        && argument
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    plain.then(|| argument.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constructor_is_what_main_hands_to_run_from_env() {
        let main = "async fn main() -> std::process::ExitCode {\n    \
                    claimonce::run_from_env(\n        x_webhook::X::from_secret,\n    )\n    \
                    .await\n}\n";
        assert_eq!(
            constructor(main).as_deref(),
            Some("x_webhook::X::from_secret")
        );
        assert_eq!(constructor("fn main() {}"), None);
        assert_eq!(constructor("claimonce::run_from_env(|s| X::new(s))"), None);
    }
}
