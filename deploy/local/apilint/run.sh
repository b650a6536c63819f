#!/usr/bin/env bash
# Lints internal/httpapi/openapi.json with Spectral (the spectral:oas
# ruleset) and Redocly (its recommended rules) at the versions pinned in
# package.json and package-lock.json beside this script, and fails on any
# warning or error of either. Used by `make apilint`, which `make test`
# runs.
#
# The linters are installed with `npm ci` into bin/tools/node_modules on
# first use, and again whenever the lock file here changes. Install
# scripts are not run: the linters need none.
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=deploy/local/apilint
tools=bin/tools
doc=internal/httpapi/openapi.json

command -v npm >/dev/null 2>&1 || {
  echo "apilint: npm is missing (Node.js 20.19 or later, with npm: apt-get install -y nodejs npm on Debian 13)" >&2
  exit 1
}
if ! cmp -s "$here/package-lock.json" "$tools/apilint.lock"; then
  echo "apilint: installing the pinned OpenAPI linters into $tools/node_modules" >&2
  mkdir -p "$tools"
  rm -f "$tools/apilint.lock"
  cp "$here/package.json" "$here/package-lock.json" "$tools/"
  npm ci --prefix "$tools" --ignore-scripts --no-audit --no-fund --loglevel=error >&2
  cp "$here/package-lock.json" "$tools/apilint.lock"
fi
bin=$tools/node_modules/.bin

# Neither linter may phone home from a test run.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true SCARF_ANALYTICS=false

echo "apilint: spectral $("$bin/spectral" --version) (spectral:oas)"
"$bin/spectral" lint --fail-severity warn --ruleset "$here/.spectral.yaml" "$doc"

# redocly lint fails on errors only: its totals decide, and on any problem
# (or when it gives no totals) it is run again to print them readably.
echo "apilint: redocly $("$bin/redocly" --version 2>/dev/null) (recommended)"
totals=$("$bin/redocly" lint --config "$here/redocly.yaml" --format json "$doc" 2>/dev/null |
  node -e 'let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
    const t = JSON.parse(s).totals; console.log(`${t.errors} ${t.warnings} ${t.ignored}`); })') || totals=
read -r errors warnings ignored <<<"${totals:-? ? ?}"
if [ "$errors" != 0 ] || [ "$warnings" != 0 ] || [ "$ignored" != 0 ]; then
  "$bin/redocly" lint --config "$here/redocly.yaml" "$doc" || true
  echo "apilint: redocly found $errors errors, $warnings warnings ($ignored ignored) in $doc" >&2
  exit 1
fi
echo "apilint: redocly: $doc has no problems"
