//! The throwaway PostgreSQL cluster of the store's tests (`tests/postgres.rs`,
//! `tests/postgres_failover.rs`), and how they start `esim serve --store`.

#![allow(dead_code)]

use crate::common;
use crate::process::{remove_data_dir, Launch};
use rust_decimal::Decimal;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::str::FromStr;
use std::time::{Duration, Instant};

/// A throwaway PostgreSQL cluster: made by `initdb`, served by `pg_ctl`, removed on drop.
pub struct Cluster {
    pub dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
    /// PostgreSQL refuses to run as root: its commands then run as `postgres`.
    as_postgres: bool,
}

/// Where PostgreSQL's programs are: `pg_config --bindir`, else Debian's place.
pub fn postgres_bin() -> PathBuf {
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let candidates = from_pg_config.into_iter().chain([PathBuf::from("/usr/lib/postgresql/15/bin")]);
    for bin in candidates {
        if bin.join("initdb").is_file() {
            return bin;
        }
    }
    panic!(
        "initdb was not found (neither `pg_config --bindir` nor /usr/lib/postgresql/15/bin has it): these tests \
         need a PostgreSQL server; install Debian's `postgresql` package (.ci/run does when it is missing)"
    );
}

pub fn run(command: &mut Command, what: &str) -> Output {
    let output = command.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Cluster {
    pub fn start(name: &str) -> Cluster {
        let bin = postgres_bin();
        let dir = std::env::temp_dir().join(format!("esim-pg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let uid = run(Command::new("id").arg("-u"), "id -u");
        let as_postgres = String::from_utf8_lossy(&uid.stdout).trim() == "0";
        if as_postgres {
            run(Command::new("chown").arg("postgres").arg(&dir), "chown postgres");
        }
        let port = free_port();
        let cluster = Cluster { dir, bin, port, as_postgres };
        let data = cluster.dir.join("data");
        run(
            cluster.pg("initdb").arg("-D").arg(&data).args([
                "-A",
                "trust",
                "-U",
                "esim",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ]),
            "initdb",
        );
        cluster.serve();
        run(
            cluster.pg("createdb").args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "esim", "esim"]),
            "createdb",
        );
        cluster
    }

    /// `pg_ctl start` on its port, its socket in its directory.
    fn serve(&self) {
        let options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.display());
        run(
            self.pg("pg_ctl")
                .arg("-D")
                .arg(self.dir.join("data"))
                .args(["-o", &options, "-w", "-l"])
                .arg(self.dir.join("log"))
                .arg("start"),
            "pg_ctl start",
        );
    }

    /// A streaming replica of this cluster (`pg_basebackup -R`), started as a hot standby
    /// connecting with the application name `name` (what `synchronous_standby_names` on
    /// the primary names).
    pub fn replica(&self, name: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("esim-pg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if self.as_postgres {
            run(Command::new("chown").arg("postgres").arg(&dir), "chown postgres");
        }
        let replica = Cluster { dir, bin: self.bin.clone(), port: free_port(), as_postgres: self.as_postgres };
        let data = replica.dir.join("data");
        run(
            replica
                .pg("pg_basebackup")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "esim", "-D"])
                .arg(&data)
                .args(["-R", "-X", "stream", "--no-sync", "--checkpoint=fast"]),
            "pg_basebackup",
        );
        let conninfo =
            format!("\nprimary_conninfo = 'host=127.0.0.1 port={} user=esim application_name={name}'\n", self.port);
        let auto_conf = data.join("postgresql.auto.conf");
        let mut settings = std::fs::read_to_string(&auto_conf).unwrap();
        settings.push_str(&conninfo);
        std::fs::write(&auto_conf, settings).unwrap();
        replica.serve();
        replica
    }

    /// Starts the server again after [`Cluster::kill`] (crash recovery runs first).
    pub fn start_again(&self) {
        self.serve();
    }

    /// The server's processes: the postmaster (the first line of `postmaster.pid`) and
    /// its children (sessions, checkpointer, WAL writer ...).
    pub fn pids(&self) -> Vec<u32> {
        let text = std::fs::read_to_string(self.dir.join("data").join("postmaster.pid")).expect("postmaster.pid");
        let postmaster: u32 = text.lines().next().and_then(|l| l.trim().parse().ok()).expect("a pid");
        let mut pids = vec![postmaster];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            // `pid (comm) state ppid ...`: the comm may hold spaces, so read after its ')'.
            let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
            if after.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(postmaster) {
                pids.push(pid);
            }
        }
        pids
    }

    /// Sends `signal` (`STOP`, `CONT`) to every process of the server.
    pub fn signal_all(&self, signal: &str) {
        let pids: Vec<String> = self.pids().iter().map(u32::to_string).collect();
        run(Command::new("kill").arg(format!("-{signal}")).args(&pids), "kill");
    }

    /// `pg_ctl promote`: a standby becomes a primary.
    pub fn promote(&self) {
        run(self.pg("pg_ctl").arg("-D").arg(self.dir.join("data")).args(["-w", "promote"]), "pg_ctl promote");
    }

    /// Stops the server at once (`-m immediate`, as a crash).
    pub fn kill(&self) {
        run(self.pg("pg_ctl").arg("-D").arg(self.dir.join("data")).args(["-m", "immediate", "stop"]), "pg_ctl stop");
    }

    /// A PostgreSQL program, run as `postgres` when the test runs as root.
    pub fn pg(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(path);
            command
        } else {
            Command::new(path)
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://esim@127.0.0.1:{}/esim", self.port)
    }

    /// One query's rows, `|`-separated.
    pub fn psql(&self, sql: &str) -> String {
        let output = run(
            Command::new(self.bin.join("psql")).args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "esim",
                "-d",
                "esim",
                "-Atc",
                sql,
            ]),
            "psql",
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.pg("pg_ctl").arg("-D").arg(self.dir.join("data")).args(["-m", "immediate", "stop"]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `esim serve --store URL` on the virtual clock, with the common tests' admin token.
pub fn launch(dir: &Path, url: &str) -> Launch {
    let mut launch = Launch::new(dir).arg("--store").arg(url).arg("--allow-insecure-webhooks").arg("--demo=false");
    launch.admin_token = Some(common::ADMIN.to_string());
    launch.log = Some(dir.with_extension("log"));
    launch.rust_log = "info".into();
    launch
}

pub fn work_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("esim-pg-serve-{name}-{}", std::process::id()));
    remove_data_dir(&dir);
    let _ = std::fs::remove_file(dir.with_extension("log"));
    dir
}

pub fn esim_cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_esim")).args(args).output().unwrap()
}

pub fn dec(value: &Value) -> Decimal {
    Decimal::from_str(&value.to_string()).unwrap()
}

/// Waits until `GET /readyz` of `base` answers 200 (a standby that took over, or an
/// owner that recovered); panics after `limit`.
pub async fn wait_ready(server: &common::TestServer, limit: Duration) {
    let began = Instant::now();
    loop {
        let ready = server.call("GET", "/readyz", "", None).await;
        if ready.status == 200 {
            return;
        }
        assert!(began.elapsed() < limit, "not ready after {limit:?}: {} {}", ready.status, ready.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `state_digest` line of `esim replay --store`, which must also say the money is
/// conserved.
pub fn replayed_digest(url: &str) -> String {
    let replay = esim_cli(&["replay", "--store", url]);
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stderr));
    let text = String::from_utf8_lossy(&replay.stdout).to_string();
    assert!(text.contains("conserved    yes"), "{text}");
    text.lines().find_map(|l| l.strip_prefix("state_digest ")).expect("a digest line").to_string()
}

/// `esim replay --store` of a 4-shard store says each shard's digest and the combined
/// one of `live` (a node's settled `/admin/v1/state`), and that money is conserved.
pub fn assert_replay_matches(url: &str, live: &Value) {
    let replay = esim_cli(&["replay", "--store", url]);
    let text = String::from_utf8_lossy(&replay.stdout).to_string();
    assert!(replay.status.success(), "{text}{}", String::from_utf8_lossy(&replay.stderr));
    assert!(text.contains("shards       4"), "{text}");
    assert!(text.contains(&format!("state_digest {}", live["state_digest"].as_str().unwrap())), "{live}\n{text}");
    for (shard, part) in live["shards"].as_array().unwrap().iter().enumerate() {
        let line = format!("shard {shard}      {}", part["state_digest"].as_str().unwrap());
        assert!(text.contains(&line), "{line} in\n{text}");
    }
    assert!(text.contains("conserved    yes"), "{text}");
}
