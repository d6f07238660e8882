//! The OpenAPI documents checked by real tools against the real `esim serve` binary
//! (issue 14): `openapi-spec-validator` validates the document as served (and the admin
//! and sandbox APIs' documents, issue 37), and
//! `schemathesis` fuzzes every operation (examples, coverage, fuzzing, and the stateful
//! phase that follows the document's links) and finds no 5xx, no status, content type or
//! body outside the document; it runs on the admin and sandbox documents too (issue 37:
//! no links there, so no stateful phase; the hook puts real ids into the paths instead).
//! Both tools come from PyPI, pinned, in one venv this file makes once per target dir
//! under `CARGO_TARGET_TMPDIR`.
//!
//! The rate limit (100 requests per minute per key, in service time) would turn a fuzzer's
//! run into 429s, which are documented and so would hide everything else: the run uses a
//! pool of keys of one funded account (the admin API makes them), rotated per request by a
//! schemathesis hook, on the virtual clock (a window never resets, so the pool is sized
//! to the run), and the test fails when more than 2% of the calls were rate-limited or
//! when too few operations ever answered a success.

mod common;
use common::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The pinned tools: versions that install here (Python 3.11) and whose CLI this test uses.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";
const SPEC_VALIDATOR: &str = "openapi-spec-validator==0.8.4";

/// Requests per key per window (`limits` of the engine: 100 per minute).
const REQUESTS_PER_KEY: usize = 100;
/// Keys in the pool: room for about 5,000 requests; a run makes about 2,000.
const KEYS: usize = 50;
/// Test cases per operation and phase (schemathesis `--max-examples`).
const EXAMPLES_PER_OPERATION: u32 = 25;
/// The whole schemathesis run is killed past this (a few minutes at most on 2 busy cores).
const RUN_DEADLINE: Duration = Duration::from_secs(300);
/// The admin and sandbox APIs' runs: test cases per operation and phase, and each run's
/// deadline (together they add about a minute and a half to CI).
const OPERATOR_EXAMPLES_PER_OPERATION: u32 = 100;
const OPERATOR_RUN_DEADLINE: Duration = Duration::from_secs(150);

/// The venv's `bin` dir with both tools installed (made once per target dir).
fn venv_bin() -> PathBuf {
    let schemathesis = SCHEMATHESIS.trim_start_matches("schemathesis==");
    let ready = format!(
        "import importlib.metadata as m, openapi_spec_validator; assert m.version('schemathesis') == '{schemathesis}'"
    );
    python_venv("openapi-tools-venv", &[SCHEMATHESIS, SPEC_VALIDATOR], &ready)
}

/// The real binary on a free loopback port, virtual clock, fresh data dir; killed on drop.
struct Served {
    child: Child,
    base: String,
    dir: PathBuf,
}

impl Served {
    fn start(name: &str) -> Served {
        let dir =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("openapi-tools-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("serve.log")).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_esim"))
            .args(["serve", "--listen", "127.0.0.1:0", "--clock", "virtual", "--seed", "7", "--demo=false"])
            .args(["--admin-token", ADMIN, "--data-dir"])
            .arg(dir.join("data"))
            .arg("--secret-key-file")
            .arg(dir.join("secret-key"))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("esim serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let address = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("first line: {line:?}"));
        Served { base: address.to_string(), child, dir }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_served_document_validates_with_openapi_spec_validator() {
    let bin = venv_bin();
    let served = Served::start("validator");
    let client = TestServer::attach(served.base.clone());
    let reply = client.raw("GET", "/api/v2/reseller/openapi.json", None, &[], Default::default()).await;
    assert_eq!(reply.status, 200);
    let document = reply.body;
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(document["webhooks"].as_object().map(|hooks| hooks.len()), Some(20), "19 events and test");

    let validate = |name: &str, document: &Value| {
        let file = served.dir.join(name);
        std::fs::write(&file, serde_json::to_vec_pretty(document).unwrap()).unwrap();
        Command::new(bin.join("openapi-spec-validator")).args(["--schema", "3.1"]).arg(&file).output().unwrap()
    };
    let output = validate("openapi.json", &document);
    let said = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && said.contains("OK"), "openapi-spec-validator: {said}");

    // The admin and sandbox documents, public too, validate alike.
    for (name, path) in [("admin.json", "/admin/v1/openapi.json"), ("sandbox.json", "/sandbox/v1/openapi.json")] {
        let reply = client.raw("GET", path, None, &[], Default::default()).await;
        assert_eq!((reply.status, &reply.body["openapi"]), (200, &json!("3.1.0")), "{path}");
        let output = validate(name, &reply.body);
        let said = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success() && said.contains("OK"), "openapi-spec-validator, {path}: {said}");
    }

    // The validator can fail: a webhook whose request body is not a Request Body Object.
    let mut broken = document.clone();
    broken["webhooks"]["esim.provisioned"]["post"]["requestBody"] = json!({ "content": "nope" });
    let output = validate("broken.json", &broken);
    assert!(!output.status.success(), "a broken document must not validate");
}

/// The schemathesis hook: rotates the pool's keys (or uses the admin token), makes each
/// valid `Idempotency-Key` unique (a fuzzer repeats short values such as "0", which would
/// answer IDEMPOTENCY_KEY_REUSED instead of running the operation; replays are covered by
/// the service's own tests), puts real ids into the path on every other call (the
/// operator APIs have no links to follow from a creation, and a random ICCID or account
/// id only ever meets a 404), and records every answer's status and error code.
const HOOKS: &str = r#"
import itertools, json, os, threading
import schemathesis

_KEYS = itertools.cycle(os.environ["ESIM_API_KEYS"].split(","))
_IDS = json.loads(os.environ.get("ESIM_PATH_IDS", "{}"))
_CALLS = itertools.count()
_LOCK = threading.Lock()
_TALLY = open(os.environ["ESIM_STATUS_TALLY"], "a", buffering=1)


@schemathesis.hook
def before_call(context, case, **kwargs):
    with _LOCK:
        key, call = next(_KEYS), next(_CALLS)
    if case.headers is None:
        case.headers = {}
    case.headers["Authorization"] = f"Bearer {key}"
    idempotency = case.headers.get("Idempotency-Key")
    if isinstance(idempotency, str) and 1 <= len(idempotency) <= 255:
        case.headers["Idempotency-Key"] = f"{idempotency[:240]}.{call}"
    if case.path_parameters and call % 2 == 0:
        for name, values in _IDS.items():
            if name in case.path_parameters:
                case.path_parameters[name] = values[(call // 2) % len(values)]


@schemathesis.hook
def after_call(context, case, response):
    code = "-"
    if response.status_code >= 400:
        try:
            code = response.json().get("code", "-")
        except Exception:
            code = "(not JSON)"
    with _LOCK:
        _TALLY.write(f"{case.method} {case.path} {response.status_code} {code}\n")
"#;

/// More steps per stateful scenario than the default 6, so chains of links
/// (provision, fund, defund) are reached.
const CONFIG: &str = "[phases.stateful]\nmax-steps = 12\n";

/// One schemathesis run against a served document.
struct Run<'a> {
    /// Names the run's work dir.
    name: &'a str,
    /// The document's path on the server.
    document: &'a str,
    /// The bearer credentials, one per request in turn.
    tokens: &'a [String],
    /// Real values of path parameters (`{"iccid": [...]}`), put in on every other call.
    ids: Value,
    /// schemathesis `--phases`.
    phases: &'a str,
    /// Test cases per operation and phase (`--max-examples`).
    examples: u32,
    /// The run is killed past this.
    deadline: Duration,
}

/// What a run printed, and every answer as (`METHOD path`, status, error code or `-`).
struct Ran {
    said: String,
    answers: Vec<(String, u16, String)>,
}

impl Ran {
    /// The operations that answered a success at least once.
    fn succeeded(&self) -> BTreeSet<&str> {
        self.answers.iter().filter(|(_, status, _)| (200..300).contains(status)).map(|(op, _, _)| op.as_str()).collect()
    }
}

/// Runs schemathesis (every check of a response against the document) and fails the test
/// on any failure or past the run's deadline.
async fn schemathesis(bin: &std::path::Path, served: &Served, run: Run<'_>) -> Ran {
    let work = served.dir.join(format!("schemathesis-{}", run.name));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("esim_hooks.py"), HOOKS).unwrap();
    std::fs::write(work.join("schemathesis.toml"), CONFIG).unwrap();
    let tally = work.join("tally");
    let report = work.join("report.txt");
    let mut child = Command::new(bin.join("st"))
        .arg("--config-file")
        .arg(work.join("schemathesis.toml"))
        .args(["--no-color", "run", &format!("{}{}", served.base, run.document)])
        .args(["--phases", run.phases])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        ])
        .args(["--max-examples", &run.examples.to_string(), "--workers", "1", "--seed", "1"])
        .args(["--request-timeout", "10"])
        .current_dir(&work)
        .env("SCHEMATHESIS_HOOKS", "esim_hooks")
        .env("PYTHONPATH", &work)
        .env("ESIM_API_KEYS", run.tokens.join(","))
        .env("ESIM_PATH_IDS", run.ids.to_string())
        .env("ESIM_STATUS_TALLY", &tally)
        .stdout(std::fs::File::create(&report).unwrap())
        .stderr(Stdio::from(std::fs::File::options().append(true).open(&report).unwrap()))
        .spawn()
        .expect("schemathesis runs");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > run.deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let said = std::fs::read_to_string(&report).unwrap_or_default();
    let document = run.document;
    let status = status.unwrap_or_else(|| panic!("schemathesis on {document} ran past {:?}:\n{said}", run.deadline));
    assert!(status.success(), "schemathesis found failures on {document} ({status}):\n{said}");
    let answers = std::fs::read_to_string(&tally)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (format!("{} {}", fields[0], fields[1]), fields[2].parse().unwrap(), fields[3].to_string())
        })
        .collect();
    eprintln!("schemathesis on {document}: {:.0?}", started.elapsed());
    Ran { said, answers }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let bin = venv_bin();
    let served = Served::start("schemathesis");
    let client = TestServer::attach(served.base.clone());

    // One funded account, room for many groups, and a pool of keys.
    let (account, first_key) = client.account(10_000.0).await;
    let limits =
        client.admin("PUT", &format!("/admin/v1/accounts/{account}/limits"), Some(json!({ "max_groups": 1000 }))).await;
    assert_eq!(limits.status, 200, "{}", limits.body);
    let mut keys = vec![first_key];
    while keys.len() < KEYS {
        let made = client.admin("POST", &format!("/admin/v1/accounts/{account}/keys"), None).await;
        assert_eq!(made.status, 201, "{}", made.body);
        keys.push(made.body["api_key"].as_str().unwrap().to_string());
    }

    let ran = schemathesis(
        &bin,
        &served,
        Run {
            name: "reseller",
            document: "/api/v2/reseller/openapi.json",
            tokens: &keys,
            ids: json!({}),
            phases: "examples,coverage,fuzzing,stateful",
            examples: EXAMPLES_PER_OPERATION,
            deadline: RUN_DEADLINE,
        },
    )
    .await;
    let said = &ran.said;
    assert!(said.contains("Stateful") && said.contains("passed"), "the stateful phase ran:\n{said}");

    // Most calls were real: few rate-limited, many operations reached a success.
    let calls = ran.answers.len();
    let limited = ran.answers.iter().filter(|(_, _, code)| code == "RATE_LIMITED").count();
    assert!(calls > 500 && calls < KEYS * REQUESTS_PER_KEY, "{calls} calls for a pool of {KEYS} keys");
    assert!(limited * 50 <= calls, "{limited} of {calls} calls were rate-limited:\n{said}");
    let succeeded = ran.succeeded();
    assert!(succeeded.len() >= 20, "only {} operations answered a success: {succeeded:?}", succeeded.len());
    eprintln!("schemathesis: {calls} calls, {limited} rate-limited, {} operations succeeded\n{said}", succeeded.len());
}

/// Issue 37: the admin and sandbox documents pass schemathesis too, against one server
/// with data in it (an account, its keys, an installed and funded eSIM), whose ids the
/// hook puts into the paths, so that the operations on an account, a key or an eSIM
/// answer their successes and not only 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_on_the_admin_and_sandbox_documents_finds_no_failure() {
    let bin = venv_bin();
    let served = Served::start("operator");
    let client = TestServer::attach(served.base.clone());
    let (account, key) = client.account(1_000.0).await;
    let mut spare_keys = Vec::new();
    for _ in 0..3 {
        let made = client.admin("POST", &format!("/admin/v1/accounts/{account}/keys"), None).await;
        assert_eq!(made.status, 201, "{}", made.body);
        spare_keys.push(made.body["api_key"].as_str().unwrap().to_string());
    }
    let mut iccids = Vec::new();
    for _ in 0..2 {
        let iccid = client.provision(&key, None).await;
        assert_eq!(client.admin("POST", &format!("/sandbox/v1/esims/{iccid}/install"), None).await.status, 200);
        let funded = client.api("POST", &format!("/esim/{iccid}/fund"), &key, Some(json!({ "amount": 100 }))).await;
        assert_eq!(funded.status, 200, "{}", funded.body);
        iccids.push(iccid);
    }
    let admin = [ADMIN.to_string()];
    let ids = json!({ "account_id": [account], "api_key": spare_keys, "iccid": iccids });

    for (api, document, least) in [("admin", "/admin/v1/openapi.json", 10), ("sandbox", "/sandbox/v1/openapi.json", 6)]
    {
        let ran = schemathesis(
            &bin,
            &served,
            Run {
                name: api,
                document,
                tokens: &admin,
                ids: ids.clone(),
                // No stateful phase: these documents have no links to follow.
                phases: "examples,coverage,fuzzing",
                examples: OPERATOR_EXAMPLES_PER_OPERATION,
                deadline: OPERATOR_RUN_DEADLINE,
            },
        )
        .await;
        let succeeded = ran.succeeded();
        let calls = ran.answers.len();
        assert!(
            succeeded.len() >= least,
            "{api}: only {} operations answered a success: {succeeded:?}",
            succeeded.len()
        );
        let mut tally = std::collections::BTreeMap::<String, usize>::new();
        for (op, status, code) in &ran.answers {
            *tally.entry(format!("{op} {status} {code}")).or_default() += 1;
        }
        let tally: Vec<String> = tally.into_iter().map(|(answer, count)| format!("{count:6} {answer}")).collect();
        eprintln!(
            "schemathesis on {document}: {calls} calls, {} operations succeeded\n{}\n{}",
            succeeded.len(),
            tally.join("\n"),
            ran.said
        );
    }
}
