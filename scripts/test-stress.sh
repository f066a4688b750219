#!/usr/bin/env bash
# make test-stress: make test's suite with two CPU-burning processes beside
# it on this machine's cores, as a loaded CI machine runs it. The
# burners are bounded in time and killed when the suite ends, however it
# ends.
set -euo pipefail
cd "$(dirname "$0")/.."
burners=()
cleanup() { for p in "${burners[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
for _ in 1 2; do
	timeout 3600 sh -c 'while :; do :; done' &
	burners+=("$!")
done
./scripts/test-deps.sh
PROD_WRITE_REQUIRE_SERVERS=1 go test -race -count=1 -timeout 30m ./...
