//! The engine stays deterministic and IO-free: its dependency tree has no runtime, no
//! HTTP and no OS entropy, and its source never reads a clock or uses floats or
//! HashMaps (whose iteration order could reach an output).

use std::path::Path;
use std::process::Command;

#[test]
fn dependency_tree_has_no_runtime_http_or_os_entropy() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["tree", "-p", "esim-engine", "-e", "normal", "--prefix", "none", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(tree.contains("rust_decimal"), "the tree was read: {tree}");
    for forbidden in ["tokio ", "hyper ", "getrandom ", "mio ", "socket2 "] {
        assert!(!tree.lines().any(|l| l.starts_with(forbidden)), "{forbidden}in the engine's tree:\n{tree}");
    }
}

#[test]
fn source_reads_no_clock_and_uses_no_floats_or_hashmaps() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("engine").join("src");
    let forbidden = [
        "SystemTime",
        "Instant::",
        "Timestamp::now",
        "Zoned::now",
        "thread_rng",
        "OsRng",
        "HashMap",
        "HashSet",
        "f64",
        "f32",
        "std::fs",
        "std::net",
        "tokio",
    ];
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (number, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for word in forbidden {
                assert!(!code.contains(word), "{}:{}: {word} in the engine: {line}", path.display(), number + 1);
            }
        }
    }
}
