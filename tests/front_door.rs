//! What a new operator meets at start-up, on the real binary: a restart names the demo
//! account and how to give it a new key (and that command works), `--speed` with the
//! virtual clock is refused, and a data dir started on the other clock says so.

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::process::{Command, Stdio};

mod process;
use process::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_names_the_demo_account_and_a_working_way_to_a_new_key() {
    let dir = std::env::temp_dir().join(format!("esim-front-door-{}", std::process::id()));
    remove_data_dir(&dir);
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    let first = Launch::new(&dir).start(true);
    assert!(first.demo_key.as_deref().is_some_and(|k| k.starts_with("rsk_")), "the first start shows the key");
    let rest = first.stop();
    assert!(!rest.contains("demo account acc"), "a new demo account is not announced twice: {rest}");

    // The announcement follows the listening line: read it all by stopping.
    let printed = Launch::new(&dir).start(false).stop();
    let line = printed.lines().find(|l| l.starts_with("demo account ")).unwrap_or_else(|| panic!("stdout: {printed}"));
    let account_id = line.split_whitespace().nth(2).unwrap().to_string();
    assert!(account_id.starts_with("acc_"), "{line}");
    let command = printed.lines().find(|l| l.contains("curl")).unwrap_or_else(|| panic!("stdout: {printed}"));
    assert!(command.contains(&format!("/admin/v1/accounts/{account_id}/keys")), "{command}");
    assert!(command.contains(&dir.join("admin-token").display().to_string()), "{command}");
    assert!(!printed.contains("rsk_"), "no key is printed on a restart: {printed}");

    // The command it printed gives the demo account a new key that works.
    let third = Launch::new(&dir).start(false);
    let path = format!("/admin/v1/accounts/{account_id}/keys");
    let (status, created) = call(&client, &third.running.base, "POST", &path, ADMIN, None, None).await.unwrap();
    assert_eq!(status, 201, "{created}");
    let key = created["api_key"].as_str().unwrap().to_string();
    let (status, balance) =
        call(&client, &third.running.base, "GET", "/api/v2/reseller/wallet/balance", &key, None, None).await.unwrap();
    assert_eq!(status, 200, "{balance}");
    assert_eq!(balance["balance_usd"].as_f64(), Some(100.0), "the demo account's $100: {balance}");
    // The operator finds the account without a report: the account list.
    let (status, listed) =
        call(&client, &third.running.base, "GET", "/admin/v1/accounts", ADMIN, None, None).await.unwrap();
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["total"], 1, "{listed}");
    let demo = &listed["accounts"][0];
    assert_eq!(demo["account_id"].as_str(), Some(account_id.as_str()), "{listed}");
    assert_eq!(demo["company_name"], "Demo Reseller", "{listed}");
    assert_eq!(demo["balance_usd"].as_f64(), Some(100.0), "{listed}");
    assert!(!listed.to_string().contains("rsk_"), "no key in the list: {listed}");
    let (status, page) =
        call(&client, &third.running.base, "GET", "/admin/v1/accounts?offset=1", ADMIN, None, None).await.unwrap();
    assert_eq!((status, page["accounts"].as_array().map(Vec::len)), (200, Some(0)), "{page}");
    let (status, refused) =
        call(&client, &third.running.base, "GET", "/admin/v1/accounts?limit=0", ADMIN, None, None).await.unwrap();
    assert_eq!((status, refused["code"].as_str()), (400, Some("VALIDATION_ERROR")), "{refused}");
    let (status, _) = call(&client, &third.running.base, "GET", "/admin/v1/accounts", &key, None, None).await.unwrap();
    assert_eq!(status, 401, "a reseller key is not the admin token");
    third.stop();

    // The same data dir on the wall clock: allowed, with a warning in the log.
    let log = dir.with_extension("log");
    let _ = std::fs::remove_file(&log);
    let mut wall = Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["serve", "--listen", "127.0.0.1:0", "--clock", "wall", "--admin-token", ADMIN, "--data-dir"])
        .arg(&dir)
        .env("ESIM_SECRET_KEY_FILE", key_file(&dir))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut first_line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(wall.stdout.as_mut().unwrap()), &mut first_line).unwrap();
    assert!(first_line.starts_with("listening on "), "{first_line}");
    unsafe_free_sigterm(&mut wall);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("this data dir ran on the virtual clock; it continues on the wall clock"), "log: {logged}");
    let _ = std::fs::remove_file(&log);
    remove_data_dir(&dir);
}

#[test]
fn speed_with_the_virtual_clock_is_refused() {
    let dir = std::env::temp_dir().join(format!("esim-front-door-speed-{}", std::process::id()));
    remove_data_dir(&dir);
    let output = Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["serve", "--listen", "127.0.0.1:0", "--clock", "virtual", "--speed", "10", "--data-dir"])
        .arg(&dir)
        .env("ESIM_SECRET_KEY_FILE", key_file(&dir))
        .output()
        .unwrap();
    assert!(!output.status.success(), "refused");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--speed applies to the wall clock only"), "{stderr}");
    assert!(!dir.join("journal").exists(), "nothing was started");
    // The same speed on the wall clock is accepted (checked without serving: --help of
    // serve documents the default).
    let help = Command::new(env!("CARGO_BIN_EXE_esim")).args(["serve", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("refused with `--clock virtual`"));
    remove_data_dir(&dir);
}

#[test]
fn a_scenario_file_replays_from_the_command_line() {
    let script =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/02_fund_dust_and_display.scenario"))
            .unwrap();
    let dir = std::env::temp_dir().join(format!("esim-front-door-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let passing = dir.join("passing.scenario");
    std::fs::write(&passing, &script).unwrap();
    let run =
        Command::new(env!("CARGO_BIN_EXE_esim")).arg("scenario").arg(&passing).arg("--transcript").output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("every expectation held"), "{stdout}");
    assert!(stdout.contains("/fund"), "the transcript shows the requests: {stdout}");

    // One wrong expectation: exit 1, and the failure names its line.
    let wrong = script.replacen("expect body.wallet_balance_usd 19.99", "expect body.wallet_balance_usd 19.98", 1);
    assert_ne!(wrong, script);
    let failing = dir.join("failing.scenario");
    std::fs::write(&failing, &wrong).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_esim")).arg("scenario").arg(&failing).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(1), "{stdout}");
    let line = wrong.lines().position(|l| l.contains("19.98")).unwrap() + 1;
    assert!(stdout.contains(&format!("line {line}")), "the failure names line {line}: {stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `--help` of each offline command says what README says of it.
#[test]
fn every_command_help_says_what_readme_says() {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_esim")).args(args).arg("--help").output().unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let expected: [(&[&str], &[&str]); 5] = [
        (&["report", "conservation"], &["--from", "--until", "html", "csv", "Exit code 1", "one row per account"]),
        (&["sim"], &["--report", "checked before the run", "one row per seed", "violation-seed-N.scenario"]),
        (&["replay"], &["--until", "live", "torn tail"]),
        (&["repair"], &["--cut-at-damage", "changes", "live (locked)"]),
        (&["scenario"], &["violation-seed-N.scenario", "--transcript"]),
    ];
    for (args, words) in expected {
        let text = help(args);
        for word in words {
            assert!(text.contains(word), "esim {} --help lacks {word:?}:\n{text}", args.join(" "));
        }
    }
}
