//! What `esim sim` and `esim scenario` do, as library functions (the binary maps its
//! arguments into [`SimOptions`] and calls them): the run with its progress on stderr,
//! its summary on stdout, and the exit status.

use crate::{SimOptions, SimSummary};
use std::io::IsTerminal;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `A..B` (B excluded) as a seed range; an empty one is refused.
pub fn parse_seed_range(text: &str) -> Result<std::ops::Range<u64>, String> {
    let (start, end) = text.split_once("..").ok_or("expected A..B, e.g. 0..10000")?;
    let start: u64 = start.trim().parse().map_err(|_| format!("{start:?} is not a seed"))?;
    let end: u64 = end.trim().parse().map_err(|_| format!("{end:?} is not a seed"))?;
    if end <= start {
        return Err("the range is empty: B must be above A".into());
    }
    Ok(start..end)
}

/// `esim sim`: runs the seeds with a progress line on stderr (a bar on a terminal, a line
/// every 5 s otherwise), prints the summary; `Err` on a violation, a determinism failure,
/// money not conserved, a report not written, or (asked) coverage missing.
pub fn simulate(options: &SimOptions) -> Result<(), String> {
    if let Some(dir) = &options.report {
        crate::check_report_dir(dir)?;
    }
    let terminal = std::io::stderr().is_terminal();
    let started = Instant::now();
    let last_print = Mutex::new(Instant::now());
    let summary = crate::run_with_progress(options, |done, total| {
        let mut last = last_print.lock().unwrap_or_else(|p| p.into_inner());
        if done == total || last.elapsed() >= Duration::from_millis(if terminal { 100 } else { 5_000 }) {
            *last = Instant::now();
            progress(terminal, done, total, started.elapsed());
        }
    });
    print_out(&format!("{}\n", summary.table()));
    outcome(&summary)
}

/// One progress report: `done` of `total` scenarios after `elapsed`.
fn progress(terminal: bool, done: u64, total: u64, elapsed: Duration) {
    let rate = done as f64 / elapsed.as_secs_f64().max(1e-9);
    if !terminal {
        eprintln!("{done}/{total} scenarios, {rate:.0}/s");
        return;
    }
    let width = 30;
    let filled = (done as usize * width) / total.max(1) as usize;
    eprint!("\r[{}{}] {done}/{total} scenarios, {rate:.0}/s ", "#".repeat(filled), " ".repeat(width - filled));
    if done == total {
        eprintln!();
    }
}

/// The exit status of a run: what failed first, in the order a reader fixes them.
fn outcome(summary: &SimSummary) -> Result<(), String> {
    if let Some(error) = &summary.report_error {
        return Err(error.clone());
    }
    if summary.ok() {
        Ok(())
    } else if summary.violations.is_empty() && summary.determinism_failures.is_empty() && summary.conservation.conserved
    {
        let missing: Vec<String> =
            summary.coverage.missing().iter().map(|i| format!("{} {}", i.family, i.name)).collect();
        Err(format!("coverage: {} item(s) reached 0 times: {}", missing.len(), missing.join(", ")))
    } else {
        Err("invariant violations found (see above); each line gives the command that replays it".into())
    }
}

/// `esim scenario FILE`: the failures of one script, or a line saying it passed
/// (`transcript`: every request, response, event and delivery first).
pub fn scenario(file: &Path, transcript: bool) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let run = crate::script::run_script(&text);
    if transcript {
        print_out(&run.transcript);
    }
    if run.failures.is_empty() {
        println!("{}: {} steps, every expectation held, no checker fired", file.display(), run.steps);
        return Ok(());
    }
    for failure in &run.failures {
        println!("{failure}");
    }
    Err(format!("{}: {} failure(s) in {} steps", file.display(), run.failures.len(), run.steps))
}

/// Writes a command's output; a reader that went away (`| head -1`) ends it quietly.
fn print_out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(error) => {
            eprintln!("esim: cannot write the output: {error}");
            std::process::exit(1)
        }
        Ok(()) => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_seed_range_is_a_to_b_with_b_excluded() {
        assert_eq!(super::parse_seed_range("0..10000"), Ok(0..10_000));
        assert_eq!(super::parse_seed_range(" 5 .. 6 "), Ok(5..6));
        assert!(super::parse_seed_range("7..7").unwrap_err().contains("empty"));
        assert!(super::parse_seed_range("7").unwrap_err().contains("A..B"));
        assert!(super::parse_seed_range("x..9").unwrap_err().contains("is not a seed"));
    }
}
