//! Signs a sample delivery for the local run with this crate's scheme (never deployed): the
//! local run starts it with the local secret and the body, and sends what it prints.

fn main() -> std::process::ExitCode {
    claimonce::verify::signer_command::serve(|secret| {
        slack_webhook::SlackSignature::new(&[secret], 0)
    })
}
