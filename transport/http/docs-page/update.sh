#!/usr/bin/env bash
# Vendors the API reference's renderer: Redoc's standalone bundle, from the npm registry
# (`npm pack`), at the version pinned below, with its licence and its third-party notices.
# The service serves these files under /docs/ from the binary (transport/http/src/docs_page.rs),
# so the page works offline and under a strict Content-Security-Policy.
#
# Two changes are made to the bundle: its source map comment goes (the map is not
# vendored), and the menu's "API docs by Redocly" logo, an image from Redocly's CDN that
# the page's policy (no remote sources) would block and report, becomes an empty inline
# SVG. The script fails if the bundle no longer has that URL exactly once, or still names
# the CDN afterwards.
#
# Usage: transport/http/docs-page/update.sh   (then rebuild; commit the changed files)
set -euo pipefail

REDOC_VERSION=2.5.4
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "redoc@${REDOC_VERSION}" >/dev/null)
tar -xzf "$work/redoc-${REDOC_VERSION}.tgz" -C "$work"
bundle="$work/package/bundles/redoc.standalone.js"

logo='https://cdn.redoc.ly/redoc/logo-mini.svg'
count="$(grep -o "$logo" "$bundle" | wc -l)"
if [ "$count" != 1 ]; then
    echo "update.sh: expected the logo URL once in the bundle, found it $count times" >&2
    exit 1
fi
sed -e '/^\/\/# sourceMappingURL=/d' -e "s#\"$logo\"#\"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E\"#" "$bundle" \
    >"$here/redoc.standalone.js"
if grep -q 'cdn\.redoc\.ly' "$here/redoc.standalone.js"; then
    echo "update.sh: the bundle still names Redocly's CDN" >&2
    exit 1
fi
cp "$work/package/LICENSE" "$here/redoc-LICENSE.txt"
cp "$work/package/bundles/redoc.standalone.js.LICENSE.txt" "$here/redoc.standalone.js.LICENSE.txt"
echo "$REDOC_VERSION" >"$here/REDOC_VERSION"
echo "vendored redoc ${REDOC_VERSION} into ${here}"
