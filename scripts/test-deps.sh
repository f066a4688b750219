#!/usr/bin/env bash
# Installs what the tests need beyond Go. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
go mod download
