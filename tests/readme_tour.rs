//! The README's five-minute tour, run as written: its command block is taken from
//! README.md, pointed at a fresh `esim serve` (the real binary, started with the
//! arguments of the README's server block), run with bash, and every `# => TEXT` and
//! `# receiver => TEXT` comment in it is checked. A README whose tour stops doing what
//! its comments say fails here.

mod process;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The HTML comments that mark the README's two blocks.
const SERVER_MARK: &str = "<!-- readme-tour-server:";
const TOUR_MARK: &str = "<!-- readme-tour:";
/// What the README's block says, replaced by what this run has.
const README_BASE: &str = "http://127.0.0.1:8080";
const README_KEY: &str = "rsk_...";
const README_DATA_DIR: &str = "/tmp/esim-tour";
/// The webhook receiver's port: where it listens and where the webhook points.
const README_RECEIVER_PORT: &str = "9000";
/// The tour takes a few seconds (one `sleep 1` at the start, one at the end).
const TOUR_DEADLINE: Duration = Duration::from_secs(60);
/// The promises a README tour must keep making: a funded wallet reads 19.99, a defund is
/// accepted with 202, and the settled return reaches the receiver.
const REQUIRED: [&str; 3] = ["\"wallet_balance_usd\":19.99", "202 Accepted", "\"event\":\"esim.defunded\""];

/// One line of the tour that says what it prints.
#[derive(Debug)]
struct Expectation {
    step: usize,
    text: String,
    /// Printed by the webhook receiver (stderr), not by the line itself (stdout).
    receiver: bool,
}

/// The first fenced block after the line holding `mark`.
fn block_after(readme: &str, mark: &str) -> Vec<String> {
    let mut lines = readme.lines().skip_while(|l| !l.contains(mark));
    assert!(lines.next().is_some(), "README.md has no {mark} comment");
    let fence = lines.next().unwrap_or_default();
    assert!(fence.starts_with("```"), "a fenced block follows {mark}, found {fence:?}");
    let block: Vec<String> = lines.take_while(|l| !l.starts_with("```")).map(str::to_string).collect();
    assert!(!block.is_empty(), "the block after {mark} is empty");
    block
}

/// The arguments of `cargo run --release -- serve ...` in the server block.
fn serve_args(server_block: &[String], data_dir: &Path) -> Vec<String> {
    let line = server_block.iter().find(|l| l.contains(" serve")).expect("the server block runs serve");
    let (_, rest) = line.split_once(" -- serve").expect("the server block is `cargo run --release -- serve ...`");
    let args: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
    assert!(args.iter().any(|a| a == README_DATA_DIR), "the server block names its data dir {README_DATA_DIR}");
    args.into_iter().map(|a| if a == README_DATA_DIR { data_dir.display().to_string() } else { a }).collect()
}

/// A command line's trailing expectation, if any, and the line without it.
fn split_expectation(line: &str) -> (&str, Option<(String, bool)>) {
    for (marker, receiver) in [("# receiver => ", true), ("# => ", false)] {
        if let Some(at) = line.rfind(marker) {
            let text = line[at + marker.len()..].trim().to_string();
            assert!(!text.is_empty(), "an empty expectation: {line}");
            return (line[..at].trim_end(), Some((text, receiver)));
        }
    }
    (line, None)
}

/// The script bash runs: each command line preceded by a marker of its step on stdout, the
/// README's placeholders replaced, and every background job ended when the script ends.
fn script(tour: &[String], values: &[(&str, String)]) -> (String, Vec<Expectation>) {
    let mut text = String::from("set -eu\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n");
    let mut expectations = Vec::new();
    for (step, line) in tour.iter().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (command, expectation) = split_expectation(line);
        if let Some((text, receiver)) = expectation {
            expectations.push(Expectation { step, text, receiver });
        }
        let mut command = command.to_string();
        for (placeholder, value) in values {
            command = command.replace(placeholder, value);
        }
        text.push_str(&format!("printf '\\n@@step {step}\\n'\n{command}\n"));
    }
    (text, expectations)
}

/// What each step printed on stdout, by the markers `script` put before it.
fn step_outputs(stdout: &str) -> Vec<(usize, String)> {
    let mut steps: Vec<(usize, String)> = Vec::new();
    for line in stdout.lines() {
        if let Some(step) = line.strip_prefix("@@step ") {
            steps.push((step.parse().unwrap(), String::new()));
        } else if let Some((_, output)) = steps.last_mut() {
            output.push_str(line);
            output.push('\n');
        }
    }
    steps
}

/// A loopback port free now, for the tour's webhook receiver.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Runs bash on `script` for at most [`TOUR_DEADLINE`]: (exit success, stdout, stderr).
fn run_bash(script: &str, dir: &Path) -> (bool, String, String) {
    let path = dir.with_extension("tour.sh");
    std::fs::write(&path, script).unwrap();
    let mut child = Command::new("bash")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs");
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    let status = process::wait_timeout(&mut child, TOUR_DEADLINE);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_file(&path);
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert!(status.is_some(), "the tour ran past {TOUR_DEADLINE:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    (status.unwrap().success(), stdout, stderr)
}

/// Starts the real binary with the README's arguments (its data dir replaced), on a free
/// port, its secret key file beside the data dir; returns it and the demo key it printed.
fn start_server(args: &[String], dir: &Path) -> (process::Running, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", "warn")
        .env("ESIM_SECRET_KEY_FILE", process::key_file(dir))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("esim serve starts");
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut lines = [String::new(), String::new()];
    for line in &mut lines {
        reader.read_line(line).unwrap();
    }
    let base = lines[0].trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("first line: {:?}", lines[0]));
    let key = lines[1].trim().strip_prefix("demo account API key (shown once): ");
    let key = key.unwrap_or_else(|| panic!("a new data dir prints the demo key; second line: {:?}", lines[1]));
    // Keep reading stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    (process::Running { child, base: base.to_string() }, key.to_string())
}

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

#[test]
fn the_readme_tour_does_what_its_comments_say() {
    let readme = readme();
    let tour = block_after(&readme, TOUR_MARK);
    let joined = tour.join("\n");
    for placeholder in [README_BASE, README_KEY, README_DATA_DIR] {
        assert!(joined.contains(placeholder), "the tour block no longer uses {placeholder}; update this test with it");
    }
    let port_uses = joined.matches(README_RECEIVER_PORT).count();
    assert!(port_uses >= 2, "the receiver listens on {README_RECEIVER_PORT} and the webhook points there");

    let dir: PathBuf = std::env::temp_dir().join(format!("esim-readme-tour-{}", std::process::id()));
    process::remove_data_dir(&dir);
    let (mut server, key) = start_server(&serve_args(&block_after(&readme, SERVER_MARK), &dir), &dir);

    let values = [
        (README_BASE, server.base.clone()),
        (README_KEY, key),
        (README_DATA_DIR, dir.display().to_string()),
        (README_RECEIVER_PORT, free_port().to_string()),
    ];
    let (script, expectations) = script(&tour, &values);
    let (success, stdout, stderr) = run_bash(&script, &dir);
    process::unsafe_free_sigterm(&mut server.child);
    process::remove_data_dir(&dir);

    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(success, "the tour's block failed\n{context}");
    let outputs = step_outputs(&stdout);
    for expectation in &expectations {
        let printed = if expectation.receiver {
            stderr.as_str()
        } else {
            outputs.iter().find(|(step, _)| *step == expectation.step).map(|(_, o)| o.as_str()).unwrap_or_default()
        };
        assert!(
            printed.contains(&expectation.text),
            "README tour line {}: {} does not print {:?}\n{context}",
            expectation.step + 1,
            if expectation.receiver { "the receiver" } else { "the command" },
            expectation.text
        );
    }
    for promise in REQUIRED {
        assert!(
            expectations.iter().any(|e| e.text.contains(promise)),
            "the tour no longer promises {promise:?}: {expectations:?}"
        );
    }
}

#[test]
fn a_tour_line_that_prints_something_else_is_caught() {
    // The checker itself can fail: a step whose output lacks its expectation.
    let tour = vec!["echo hello   # => goodbye".to_string()];
    let (script, expectations) = script(&tour, &[]);
    let dir = std::env::temp_dir().join(format!("esim-readme-tour-self-{}", std::process::id()));
    let (success, stdout, _) = run_bash(&script, &dir);
    assert!(success);
    let outputs = step_outputs(&stdout);
    assert_eq!(expectations.len(), 1);
    assert_eq!(outputs, vec![(0, "hello\n".to_string())]);
    assert!(!outputs[0].1.contains(&expectations[0].text));
}
