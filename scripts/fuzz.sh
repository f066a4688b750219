#!/usr/bin/env bash
# Runs every go test -fuzz target in the module for $FUZZTIME each.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-3s}
n=0
while IFS= read -r line; do
  file=${line%%:*}
  name=$(sed -E 's/^.*func (Fuzz[A-Za-z0-9_]+).*/\1/' <<<"$line")
  pkg=./$(dirname "$file")
  echo "fuzz: $pkg $name for $FUZZTIME"
  go test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" -fuzzminimizetime=2s "$pkg"
  n=$((n+1))
done < <(grep -rn --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . | sort)
echo "fuzz: $n targets ran"
