#!/usr/bin/env bash
# Builds the data dir behind docs/screenshots/finance-report.png: three resellers over a week of
# virtual time (top-ups, an auto-refill, eSIMs funded and used, a group, returns, a
# terminate), then writes the HTML report of the week and takes the screenshot.
#   docs/finance-report-demo.sh [ESIM_BINARY]    (needs curl; chromium for the screenshot)
set -euo pipefail
esim=${1:-target/release/esim}
dir=$(mktemp -d)
port=18765
base=http://127.0.0.1:$port
token=demo-admin-token
"$esim" serve --listen 127.0.0.1:$port --clock virtual --seed 7 --demo=false --admin-token $token \
  --data-dir "$dir/data" --secret-key-file "$dir/key" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do curl -sf -o /dev/null -H "Authorization: Bearer $token" $base/sandbox/v1/clock && break; sleep 0.1; done

call() { # METHOD PATH TOKEN [BODY] -> response body
  curl -sf -X "$1" "$base$2" -H "Authorization: Bearer $3" -H 'Content-Type: application/json' ${4:+-d "$4"}
}
field() { sed -E "s/.*\"$1\":\"([^\"]+)\".*/\1/"; }
admin() { call "$1" "$2" $token "${3:-}"; }
advance() { admin POST /sandbox/v1/clock/advance "{\"seconds\":$1}" >/dev/null; }
account() { # COMPANY -> "id key"
  local created
  created=$(admin POST /admin/v1/accounts "{\"contact_email\":\"finance@example.com\",\"company_name\":\"$1\"}")
  echo "$(echo "$created" | field account_id) $(echo "$created" | field api_key)"
}
topup() { admin POST "/admin/v1/accounts/$1/topups" "{\"amount_usd\":$2}" >/dev/null; }
provision() { call POST /api/v2/reseller/esim/provision "$1" '{"end_user_reference":"trip"}' | field iccid; }
fund() { call POST "/api/v2/reseller/esim/$2/fund" "$1" "{\"amount\":$3}" >/dev/null; }
use_data() {
  admin POST "/sandbox/v1/esims/$1/install" >/dev/null
  admin POST "/sandbox/v1/esims/$1/usage" "{\"mb\":$2,\"country\":\"DE\"}" >/dev/null
}

read -r acme acme_key <<<"$(account 'Acme Roaming, Inc.')"
read -r nomad nomad_key <<<"$(account 'Nomad SIMs')"
read -r blue blue_key <<<"$(account 'Blue Lagoon Travel')"
day=86400
# Day 1: money in, the first eSIMs.
topup "$acme" 2500; topup "$nomad" 10; topup "$blue" 800
admin PUT "/admin/v1/accounts/$nomad/auto-refill" '{"enabled":true,"amount_usd":150,"card":"ok"}' >/dev/null
for _ in 1 2 3; do provision "$nomad_key" >/dev/null; done
a1=$(provision "$acme_key"); fund "$acme_key" "$a1" 120.50; use_data "$a1" 2400
b1=$(provision "$blue_key"); fund "$blue_key" "$b1" 45; use_data "$b1" 800
advance $((day + 3600))
# Day 2: a group, more usage.
gid=$(call POST /api/v2/reseller/groups "$acme_key" '{"name":"Field team"}' | field id)
call POST "/api/v2/reseller/groups/$gid/fund" "$acme_key" '{"amount":400}' >/dev/null
a2=$(provision "$acme_key"); fund "$acme_key" "$a2" 60; use_data "$a2" 1500
n1=$(provision "$nomad_key"); fund "$nomad_key" "$n1" 35; use_data "$n1" 900
advance $day
# Day 3: a defund (its return settles 15 minutes later), a terminate.
call POST "/api/v2/reseller/esim/$a2/defund" "$acme_key" >/dev/null
call POST "/api/v2/reseller/esim/$b1/terminate" "$blue_key" >/dev/null
topup "$blue" 300
advance $day
# Day 4: quiet. Day 5: more eSIMs and top-ups.
advance $day
topup "$acme" 1200
for mb in 700 1300 2100; do s=$(provision "$acme_key"); fund "$acme_key" "$s" 55.55; use_data "$s" $mb; done
b2=$(provision "$blue_key"); fund "$blue_key" "$b2" 90; use_data "$b2" 3000
advance $day
# Day 6: the group goes back, more usage.
call POST "/api/v2/reseller/groups/$gid/defund" "$acme_key" >/dev/null
use_data "$n1" 400
advance $day
# Day 7.
topup "$nomad" 200
n2=$(provision "$nomad_key"); fund "$nomad_key" "$n2" 80; use_data "$n2" 1200
advance 7200

curl -sf -H "Authorization: Bearer $token" "$base/admin/v1/reports/conservation?format=html&from=2026-01-01&until=2026-01-08" \
  >"$dir/finance-report.html"
if command -v chromium >/dev/null; then
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot=docs/screenshots/finance-report.png \
    --window-size=1200,2760 "file://$dir/finance-report.html" 2>/dev/null
fi
echo "screenshot: docs/screenshots/finance-report.png"
