#!/usr/bin/env bash
# make bench: docs/DESIGN.md §15's goals as ratios measured side by side in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-bin/prod-write}
# The fleet row races real runs against dynalite: install it (idempotent).
./scripts/test-deps.sh >&2
# The run row's peer is sudo -n /bin/true by the same account (docs/DESIGN.md §15).
if ! command -v sudo >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sudo; } >&2 || echo "bench: could not install sudo; the peer row is skipped" >&2
fi
go build -trimpath -o bin/floor ./testdata/bench/floor
# The run-parts row's programs are built as the run client is (Makefile).
CGO_ENABLED=0 go build -trimpath -o bin/parts/ ./testdata/bench/parts/...
go build -trimpath -o bin/prod-write-bench ./cmd/prod-write-bench
exec bin/prod-write-bench -bin "$BIN" -floor bin/floor -parts bin/parts "${@:2}"
