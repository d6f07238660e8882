//! What a start checks before it writes anything (issue 35): a secret key file its
//! group or others may read is refused, naming the mode and the fix, and left as it
//! is; a start that fails (a missing key file for a data dir with sealed secrets, a
//! busy port, a held lock) leaves no new key file behind; a data dir whose last
//! service time is ahead of the wall clock by more than the tolerance is refused on the
//! wall clock, naming both times and the flag that starts it anyway.

use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

mod process;
use process::*;

fn test_root(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("esim-start-checks-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    root
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Runs a start expected to fail: its exit (within 10 s) and its log.
fn refused(launch: &Launch) -> (ExitStatus, String) {
    let mut child = launch.command().spawn().unwrap();
    let exit = wait_timeout(&mut child, Duration::from_secs(10));
    if exit.is_none() {
        let _ = child.kill();
    }
    let _ = child.wait();
    let log = launch.log.as_ref().map(|p| std::fs::read_to_string(p).unwrap_or_default()).unwrap_or_default();
    (exit.unwrap_or_else(|| panic!("the start did not end within 10 s; log:\n{log}")), log)
}

/// The files under `dir` with their sizes (what a refused start must leave as it was).
fn contents(dir: &Path) -> Vec<(PathBuf, u64)> {
    walk(dir).into_iter().map(|(path, _)| (path.clone(), std::fs::metadata(&path).unwrap().len())).collect()
}

#[cfg(unix)]
#[test]
fn a_key_file_others_may_read_is_refused_naming_the_mode_and_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let root = test_root("modes");
    let mut launch = Launch::new(&root.join("data")).arg("--demo=false");
    launch.key_file = root.join("secret-key");
    launch.log = Some(root.join("serve.log"));
    launch.start(false).stop();
    assert_eq!(mode(&launch.key_file), 0o600);
    std::fs::set_permissions(&launch.key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = contents(&launch.dir);
    let (exit, log) = refused(&launch);
    println!("exit {exit:?}; log:\n{log}");
    assert!(!exit.success());
    let shown = launch.key_file.display().to_string();
    assert!(log.contains(&format!("the secret key file {shown} has mode 0644")), "{log}");
    assert!(log.contains(&format!("chmod 600 {shown}")), "the fix: {log}");
    assert_eq!(mode(&launch.key_file), 0o644, "refused, not quietly made private");
    assert_eq!(contents(&launch.dir), before, "nothing written");
    // Made private again, the same data dir starts.
    std::fs::set_permissions(&launch.key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    launch.start(false).stop();
    std::fs::remove_dir_all(&root).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_start_leaves_no_new_key_file() {
    let root = test_root("no-key-left");
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    // A data dir holding a sealed signing secret, then its key file gone.
    let mut launch = Launch::new(&root.join("data")).arg("--demo=false").arg("--allow-insecure-webhooks");
    launch.key_file = root.join("keys").join("secret-key");
    launch.log = Some(root.join("serve.log"));
    let server = launch.start(false);
    let base = server.running.base.clone();
    let (status, created) =
        call(&client, &base, "POST", "/admin/v1/accounts", ADMIN, Some(json!({"contact_email": "a@b.example"})), None)
            .await
            .unwrap();
    assert_eq!(status, 201, "{created}");
    let key = created["api_key"].as_str().unwrap();
    let hook = json!({ "url": "http://127.0.0.1:9/hook", "events": ["*"] });
    let (status, webhook) =
        call(&client, &base, "POST", "/api/v2/reseller/webhooks", key, Some(hook), None).await.unwrap();
    assert_eq!(status, 201, "{webhook}");
    server.stop();
    std::fs::remove_file(&launch.key_file).unwrap();
    let before = contents(&launch.dir);
    let (exit, log) = refused(&launch);
    println!("missing key file: exit {exit:?}; log:\n{log}");
    assert!(!exit.success());
    assert!(
        log.contains(&format!("the secret key file {} does not exist", launch.key_file.display())),
        "names the key file: {log}"
    );
    assert!(log.contains(webhook["id"].as_str().unwrap()), "names a webhook it could not open: {log}");
    assert!(!launch.key_file.exists(), "no new key file made by a start that fails");
    assert_eq!(contents(&launch.dir), before, "nothing written");

    // A busy port: refused before anything is made.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    let (new_dir, new_key) = (root.join("busy"), root.join("busy.secret-key"));
    let output = Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["serve", "--listen", &busy, "--clock", "virtual", "--data-dir"])
        .arg(&new_dir)
        .env("ESIM_SECRET_KEY_FILE", &new_key)
        .env("ESIM_ADMIN_TOKEN", ADMIN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("busy port: {:?}; stderr:\n{stderr}", output.status);
    assert!(!output.status.success());
    assert!(stderr.contains(&format!("cannot listen on {busy}")), "{stderr}");
    assert!(!new_key.exists(), "no key file made by a start on a busy port");
    assert!(!new_dir.join("journal").exists() && !new_dir.join("admin-token").exists(), "no journal made");
    drop(taken);

    // A held lock: the second start on a live data dir makes no key file of its own.
    std::fs::write(&launch.key_file, format!("{}\n", "ab".repeat(32))).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&launch.key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let mut other = Launch::new(&root.join("locked")).arg("--demo=false");
    other.key_file = root.join("locked.secret-key");
    let first = other.start(false);
    other.key_file = root.join("second.secret-key");
    other.log = Some(root.join("second.log"));
    let (exit, log) = refused(&other);
    println!("held lock: exit {exit:?}; log:\n{log}");
    assert!(!exit.success());
    assert!(log.contains(&format!("pid {}", first.pid())), "names the holder: {log}");
    assert!(!other.key_file.exists(), "no key file made by a start refused for the lock");
    first.stop();
    std::fs::remove_dir_all(&root).unwrap();
}

/// The virtual clock's start (2026-01-01T00:00:00Z, `Millis::VIRTUAL_EPOCH`).
const VIRTUAL_EPOCH_MS: i64 = 1_767_225_600_000;
/// The sandbox advances the clock by at most a year at a time.
const ADVANCE_MAX_S: i64 = 365 * 86_400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_ahead_of_the_wall_clock_is_refused_on_it_unless_allowed() {
    let root = test_root("ahead");
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let mut launch = Launch::new(&root.join("data")).arg("--demo=false");
    launch.key_file = root.join("secret-key");
    launch.log = Some(root.join("serve.log"));
    // On the virtual clock, advanced past the wall clock.
    let server = launch.start(false);
    let wall_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    // Ten days and an hour ahead: some seconds pass before the start on the wall clock.
    let mut left_s = (wall_ms - VIRTUAL_EPOCH_MS).max(0) / 1000 + 10 * 86_400 + 3_600;
    let mut service_ms = VIRTUAL_EPOCH_MS;
    while left_s > 0 {
        let seconds = left_s.min(ADVANCE_MAX_S);
        let body = json!({ "seconds": seconds });
        let (status, reply) =
            call(&client, &server.running.base, "POST", "/sandbox/v1/clock/advance", ADMIN, Some(body), None)
                .await
                .unwrap();
        assert_eq!(status, 200, "{reply}");
        left_s -= seconds;
        service_ms += seconds * 1000;
    }
    server.stop();
    let service_time = esim_engine::Millis(service_ms).to_string();

    let wall_log = root.join("wall.log");
    let before = contents(&launch.dir);
    let mut child = on_the_wall_clock(&launch, &wall_log, &[]).spawn().unwrap();
    let exit = wait_timeout(&mut child, Duration::from_secs(10));
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&wall_log).unwrap();
    println!("on the wall clock: exit {exit:?}; log:\n{log}");
    assert!(!exit.expect("refused at once").success());
    assert!(log.contains(&format!("this data dir's last service time {service_time} is 10 days 0 h ahead")), "{log}");
    assert!(log.contains("ahead of the wall clock (20"), "names the wall clock's time: {log}");
    assert!(log.contains("--clock virtual") && log.contains("--allow-time-ahead"), "names the ways on: {log}");
    assert_eq!(contents(&launch.dir), before, "nothing written");

    // Allowed: it starts, and service time continues from where it was.
    let mut child = on_the_wall_clock(&launch, &wall_log, &["--allow-time-ahead"]).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
    let base = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{line:?}")).to_string();
    let (status, state) = call(&client, &base, "GET", "/admin/v1/state", ADMIN, None, None).await.unwrap();
    assert_eq!(status, 200, "{state}");
    unsafe_free_sigterm(&mut child);
    // And on its own clock it starts as ever.
    launch.start(false).stop();
    std::fs::remove_dir_all(&root).unwrap();
}

/// `esim serve` of `launch`'s data dir and key file on the wall clock (`Launch` always
/// says `--clock virtual`, and clap refuses a second `--clock`).
fn on_the_wall_clock(launch: &Launch, log: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_esim"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--clock", "wall", "--demo=false", "--admin-token", ADMIN])
        .arg("--data-dir")
        .arg(&launch.dir)
        .args(extra)
        .env("ESIM_SECRET_KEY_FILE", &launch.key_file)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap());
    command
}

/// A second `esim serve` on a port already in use (the README's first server still
/// running) ends before anything is written: no data dir, no lock, no demo account
/// whose key would never be shown again (decision 268).
#[test]
fn a_busy_port_ends_the_start_before_the_data_dir_is_made() {
    let root = test_root("busy-port");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let data_dir = root.join("data");
    let output = Command::new(env!("CARGO_BIN_EXE_esim"))
        .args(["serve", "--clock", "virtual", "--listen", &address, "--data-dir"])
        .arg(&data_dir)
        .env("ESIM_SECRET_KEY_FILE", root.join("secret-key"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("cannot listen on {address}")), "{stderr}");
    assert!(!data_dir.exists(), "a refused start made {}: {:?}", data_dir.display(), walk(&data_dir));
    assert!(!root.join("secret-key").exists(), "no key file either");
    // Once the port is free, a start makes the data dir and shows the demo key.
    drop(taken);
    let launch = Launch::new(&data_dir);
    let started = launch.start(true);
    let key = started.demo_key.clone().expect("the demo key line");
    assert!(key.starts_with("rsk_") && key.len() == 68, "{key}");
    started.stop();
    assert!(data_dir.join("lock").exists());
    std::fs::remove_dir_all(&root).unwrap();
}
