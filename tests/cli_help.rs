//! The command line guides: `esim serve --help` in groups (what a first start needs
//! first), serve-only options only in serve's help, `--version` naming the interface,
//! and the offline commands reading `./esim-data` by default, as `esim serve` writes it.

use std::process::{Command, Output};

fn esim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_esim")).args(args).output().expect("esim runs")
}

fn help(args: &[&str]) -> String {
    let out = esim(&[args, &["--help"]].concat());
    assert!(out.status.success(), "esim {args:?} --help: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Where `needle` first appears in `text` (it must).
fn at(text: &str, needle: &str) -> usize {
    text.find(needle).unwrap_or_else(|| panic!("{needle:?} is not in:\n{text}"))
}

/// Where the line of `option` starts in `text` (its own line, not a mention in another's help).
fn option_at(text: &str, option: &str) -> usize {
    let mut place = 0;
    for line in text.split_inclusive('\n') {
        let name = line.trim_start().split([' ', '[', '\n']).next().unwrap_or("");
        if name == option {
            return place;
        }
        place += line.len();
    }
    panic!("no line of {option} in:\n{text}")
}

#[test]
fn serve_help_is_grouped_with_the_essentials_first() {
    let text = help(&["serve"]);
    let headings = ["Essentials:", "Keys, seed and time:", "Store (PostgreSQL) and standby:", "Shards and nodes:"];
    let headings = [&headings[..], &["Limits:", "Logging:"]].concat();
    let places: Vec<usize> = headings.iter().map(|heading| at(&text, heading)).collect();
    assert!(places.windows(2).all(|pair| pair[0] < pair[1]), "headings in order {headings:?}:\n{text}");
    // Each option under its own heading.
    let under = |option: &str, heading: usize| {
        let place = option_at(&text, option);
        assert!(place > places[heading], "{option} after {:?}:\n{text}", headings[heading]);
        if let Some(next) = places.get(heading + 1) {
            assert!(place < *next, "{option} before {:?}:\n{text}", headings[heading + 1]);
        }
    };
    for option in ["--listen", "--data-dir", "--clock", "--admin-token", "--demo"] {
        under(option, 0);
    }
    under("--secret-key-file", 1);
    under("--store", 2);
    under("--take-over", 2);
    under("--own-shards", 3);
    under("--max-connections", 4);
    under("--log-format", 5);
    under("--log-buffer-lines", 5);
    assert!(option_at(&text, "--clock") < option_at(&text, "--store"), "--clock comes before --store:\n{text}");
}

#[test]
fn serve_only_options_stay_in_serves_help() {
    for command in [&["sim"][..], &["replay"], &["repair"], &["scenario"], &["report", "conservation"]] {
        let text = help(command);
        assert!(!text.contains("--log-buffer-lines"), "esim {command:?} --help:\n{text}");
        assert!(!text.contains("--listen"), "esim {command:?} --help:\n{text}");
    }
    for command in [&["sim"][..], &["scenario"]] {
        assert!(!help(command).contains("--log-format"), "{command:?} writes no log lines");
    }
    // The option still works where it belongs, after the command as before.
    assert!(help(&["replay"]).contains("--log-format"));
    let out = esim(&["sim", "--log-buffer-lines", "10"]);
    assert!(!out.status.success(), "sim refuses a serve-only option");
}

#[test]
fn every_option_and_command_has_a_help_line() {
    let commands: [&[&str]; 7] =
        [&[], &["serve"], &["sim"], &["replay"], &["repair"], &["scenario"], &["report", "conservation"]];
    for command in commands {
        let text = help(command);
        for line in text.lines().filter(|line| line.trim_start().starts_with("--")) {
            // `  --name <VALUE>  help` on one line, or the name alone with its help below.
            let (name, rest) = line.trim_start().split_once("  ").unwrap_or((line.trim(), ""));
            let below = text.split(line).nth(1).and_then(|after| after.lines().nth(1)).unwrap_or("");
            assert!(!rest.trim().is_empty() || !below.trim().is_empty(), "esim {command:?}: {name} has no help");
        }
    }
    let top = help(&[]);
    for command in ["serve", "sim", "replay", "report", "repair", "scenario"] {
        let line = top.lines().find(|line| line.trim_start().starts_with(command)).expect(command);
        assert!(line.trim_start().len() > command.len() + 10, "esim --help: {command} has no help line");
    }
}

#[test]
fn version_names_the_crate_and_the_interface() {
    let out = esim(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let expected = format!(
        "esim {} (Reseller eSIM Connectivity Service, interface {})\n",
        env!("CARGO_PKG_VERSION"),
        esim_http::deploy::INTERFACE_VERSION
    );
    assert_eq!(text, expected);
}

#[test]
fn offline_commands_read_the_serve_data_dir_by_default() {
    for command in [&["report", "conservation"][..], &["replay"]] {
        let text = help(command);
        assert!(text.contains("[default: ./esim-data]"), "esim {command:?} --help:\n{text}");
    }
    // Run where no ./esim-data exists: the default is what is read, and named.
    let dir = std::env::temp_dir().join(format!("esim-cli-help-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for command in [&["report", "conservation"][..], &["replay"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_esim")).args(command).current_dir(&dir).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "nothing to read");
        assert!(stderr.contains("./esim-data"), "esim {command:?} names the default data dir: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
