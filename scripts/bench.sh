#!/usr/bin/env bash
# make bench: SPEC §15's goals as ratios measured side by side in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-bin/prod-write}
# The fleet row races real runs against dynalite: install it (idempotent).
./scripts/test-deps.sh >&2
go build -trimpath -o bin/floor ./testdata/bench/floor
go build -trimpath -o bin/prod-write-bench ./cmd/prod-write-bench
exec bin/prod-write-bench -bin "$BIN" -floor bin/floor "${@:2}"
