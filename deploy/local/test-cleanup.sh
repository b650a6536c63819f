#!/usr/bin/env bash
# Run by `make test` after the tests: drops the migrated template databases
# the tests clone their databases from (internal/db/dbtest keeps one per
# schema version while tests run). A template still in use by another run
# of the tests is left to that run.
set -uo pipefail
psql -h 127.0.0.1 -U postgres -tAc \
  "SELECT datname FROM pg_database WHERE datname LIKE 'hookline\_tpl\_%'" 2>/dev/null |
  while read -r db; do
    [ -n "$db" ] && psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS \"$db\"" >/dev/null 2>&1
  done
exit 0
