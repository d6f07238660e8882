//! Replays a scenario script (or a `violation-seed-N.scenario` written by `esim sim --report`)
//! and prints its transcript and failures: `cargo run --release -p esim-sim --example script -- FILE`.
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: script FILE.scenario");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("{path}: {error}");
            return ExitCode::from(2);
        }
    };
    let run = esim_sim::script::run_script(&text);
    print!("{}", run.transcript);
    for failure in &run.failures {
        println!("FAILED {failure}");
    }
    if run.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
