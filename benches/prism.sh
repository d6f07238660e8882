#!/usr/bin/env bash
# The anchor an integrator would otherwise use (issue 15): Stoplight Prism mocking our own
# openapi.json, measured beside the real service on the same read with the same load
# (benches/http.rs) in one run. Installs Prism into a temporary directory (npm registry);
# not part of CI. Usage: benches/prism.sh   (LOAD_SECS and LOAD_CONNECTIONS as for the bench)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'kill "${prism_pid:-0}" "${esim_pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
echo "installing @stoplight/prism-cli into $work" >&2
(cd "$work" && npm install --silent --no-audit --no-fund @stoplight/prism-cli >/dev/null)
# The document as the service serves it.
cargo build --release --bin esim >/dev/null
target/release/esim serve --listen 127.0.0.1:0 --data-dir "$work/data" --clock virtual \
  --admin-token bench --secret-key-file "$work/secret-key" >"$work/esim.out" 2>/dev/null &
esim_pid=$!
for _ in $(seq 100); do grep -q '^listening on' "$work/esim.out" 2>/dev/null && break; sleep 0.1; done
base=$(sed -n 's/^listening on http:\/\///p' "$work/esim.out" | head -1)
curl -sf "http://$base/api/v2/reseller/openapi.json" >"$work/openapi.json"
kill "$esim_pid"; unset esim_pid
# Static examples (no faker), on a free port; `prism mock` serves the paths at its root.
port=4010
"$work/node_modules/.bin/prism" mock --host 127.0.0.1 --port "$port" --errors false "$work/openapi.json" \
  >"$work/prism.log" 2>&1 &
prism_pid=$!
for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$port/esim/1" && break; sleep 0.1; done
PRISM_BASE="127.0.0.1:$port" cargo bench --bench http
