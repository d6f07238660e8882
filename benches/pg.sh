#!/usr/bin/env bash
# The durable fund on the PostgreSQL store beside the file journal (issue 17), in one run
# of benches/http.rs: makes a throwaway PostgreSQL cluster (`initdb` into a temporary
# directory, `pg_ctl` on a free loopback port; as the `postgres` user when run as root),
# runs the bench with PG_URL pointing at it, then stops and removes the cluster. Default
# settings (fsync on, synchronous_commit on, no standby). Not part of CI.
# Usage: benches/pg.sh   (LOAD_SECS, LOAD_CONNECTIONS and LOAD_ONLY as for the bench)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(pg_config --bindir 2>/dev/null || true)
[ -x "$bin/initdb" ] || bin=/usr/lib/postgresql/15/bin
[ -x "$bin/initdb" ] || { echo "initdb not found: install Debian's postgresql package" >&2; exit 1; }
work=$(mktemp -d)
as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$work"
trap 'as_postgres "$bin/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
as_postgres "$bin/initdb" -D "$work/data" -A trust -U esim -E UTF8 --no-instructions >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
as_postgres "$bin/pg_ctl" -D "$work/data" -o "-p $port -k $work -c listen_addresses=127.0.0.1" -w -l "$work/log" start >/dev/null
as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U esim esim
echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (data in $work)" >&2
PG_URL="postgres://esim@127.0.0.1:$port/esim" cargo bench --bench http
