//! One piece of a delivery's work done by a crate we depend on, repeated, so that callgrind
//! can count its instructions alone: the least that piece costs whatever our own code does
//! around it. Each piece works on the rejected delivery of `lambda-loop` (its `invoice.paid`
//! body, as the event carries it). Run it under callgrind twice, with `--times 100` and
//! `400`: the difference of the two totals over 300 is one repetition (BENCHMARKS.md, "What
//! the targets would take").
//!
//! ```text
//! cargo build --release -p claimonce-bench --bins
//! valgrind --tool=callgrind ./target/release/bounds <piece> --times 100
//! ```

use std::hint::black_box;

use claimonce_bench::invoice;
use serde_json::value::RawValue;

const USAGE: &str = "usage: bounds <piece> [--times 100]
  raw       the body's string read as the floor reads its event: scanned, copied as raw JSON
  string    the body's string read into text, unescaped (the least our event reader does)
  scan      the unescaped body checked as JSON, nothing kept: the least any parser of it costs
  parse     Stripe's parser on the unescaped body (stripe_webhook::parse_event)
  --times N how many times to do it";

#[derive(Clone, Copy)]
enum Piece {
    Raw,
    Text,
    Scan,
    Parse,
}

/// (piece, times), or the message to print and the exit code.
fn args() -> Result<(Piece, u64), (String, u8)> {
    use lexopt::prelude::*;
    let (mut piece, mut times) = (None, 100);
    let mut parser = lexopt::Parser::from_env();
    let bad = |e: lexopt::Error| (format!("bounds: {e}\n{USAGE}"), 2);
    while let Some(arg) = parser.next().map_err(bad)? {
        match arg {
            Long("times") => times = parser.value().map_err(bad)?.parse().map_err(bad)?,
            Value(name) if piece.is_none() => {
                piece = Some(match name.to_string_lossy().as_ref() {
                    "raw" => Piece::Raw,
                    "string" => Piece::Text,
                    "scan" => Piece::Scan,
                    "parse" => Piece::Parse,
                    other => return Err((format!("bounds: no piece {other:?}\n{USAGE}"), 2)),
                });
            }
            Short('h') | Long("help") => return Err((USAGE.to_owned(), 0)),
            other => return Err(bad(other.unexpected())),
        }
    }
    let piece = piece.ok_or_else(|| (format!("bounds: name a piece\n{USAGE}"), 2))?;
    Ok((piece, times))
}

fn main() -> std::process::ExitCode {
    let (piece, times) = match args() {
        Ok(a) => a,
        Err(stop) => return claimonce_bench::exit_with(stop),
    };
    let body = invoice("evt_r_1", "cus_r", 1);
    // The body as the event carries it: a JSON string.
    let literal = serde_json::to_string(&String::from_utf8_lossy(&body)).unwrap_or_default();
    let mut done = 0_u64;
    for _ in 0..times {
        let ok = match piece {
            Piece::Raw => serde_json::from_str::<Box<RawValue>>(black_box(&literal)).is_ok(),
            Piece::Text => serde_json::from_str::<String>(black_box(&literal)).is_ok(),
            Piece::Scan => serde_json::from_slice::<&RawValue>(black_box(&body)).is_ok(),
            Piece::Parse => stripe_webhook::parse_event(black_box(&body)).is_ok(),
        };
        done += u64::from(ok);
    }
    if done != times {
        eprintln!("bounds: {} of {times} failed", times - done);
        return std::process::ExitCode::FAILURE;
    }
    println!("{times} done, the body {} bytes", body.len());
    std::process::ExitCode::SUCCESS
}
