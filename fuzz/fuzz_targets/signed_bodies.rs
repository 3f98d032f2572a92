//! Arbitrary bodies behind a VALID signature: each input is signed with every registered
//! receiver's own local secret at the current time, under the unsigned headers of each of its
//! sample events, then admitted. This fuzzes every provider's parser, which only ever sees
//! signed bodies, and the effect it chooses (`Fuzzed::check_signed_body` says what must hold).
#![no_main]

use claimonce_fuzz::{RECEIVERS, unix_now};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    let receivers = &*RECEIVERS;
    let now = unix_now();
    for receiver in &receivers.all {
        receiver.check_signed_body(body, now);
    }
    receivers.take_log();
});
