#!/usr/bin/env bash
# make demo: the whole prod-write story on the embedded store, in a
# temporary directory, printing each step.
set -uo pipefail
BIN=$(realpath "${1:-bin/prod-write}")
DIR=$(mktemp -d "${TMPDIR:-/tmp}/prod-write-demo.XXXXXX")
cd "$DIR"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() {
  printf '$ prod-write %s\n' "$*"
  "$BIN" "$@"
  local rc=$?
  printf '[exit %d]\n' "$rc"
  return $rc
}
expect() { # expect CODE prod-write-args...
  local want=$1; shift
  run "$@"; local rc=$?
  if [ "$rc" -ne "$want" ]; then echo "demo: expected exit $want, got $rc" >&2; exit 1; fi
}
fp() { grep -oE 'sha256:[0-9a-f]{64}' | head -1; }

step "1. An admin sets up a deployment with a demo cast of keys"
expect 0 init --demo .
expect 0 ops list

step "2. The agent plans a production write: install a reviewed config file"
printf '[server]\nport = 8080\n' > api.toml
expect 0 plan config-push --target staging --param service=api --file config=api.toml --key keys/agent.key > plan.out; cat plan.out
FP=$(fp < plan.out)

step "3. Nothing may run yet: status says what is missing"
expect 77 status "$FP"
expect 77 run "$FP"

step "4. Smith (operator) files a certainty record"
expect 0 file "$FP" --key keys/smith.key --summary "Install api's reviewed config in staging" \
  --effect "api reads port 8080 on its next reload" --blast-radius "api in staging only" \
  --rollback "re-run with the previous file" --certainty high

step "5. Smith tries to approve its own record: refused"
expect 77 decide "$FP" approve --key keys/smith.key

step "6. Alice (approver) approves on the CLI"
expect 0 decide "$FP" approve --key keys/alice.key --reason "reviewed the diff"
expect 0 status "$FP"

step "7. The runner executes it: intent receipt fsynced, install runs with no shell, outcome receipt"
export DEPLOY_TOKEN=demo-secret-not-in-any-receipt
expect 0 run "$FP"
echo "--- srv/staging/api.toml:"; cat srv/staging/api.toml

step "8. The approval was single-use"
expect 77 run "$FP"

step "9. The same plan, changed after approval, no longer matches"
FP2=$("$BIN" plan config-push --target production --param service=api --file config=api.toml --key keys/agent.key | fp)
"$BIN" gera go "$FP2" --uses 2 --key keys/gera.key
printf '[server]\nport = 9999\n' > api.toml
expect 77 run "$FP2"
printf '[server]\nport = 8080\n' > api.toml

step "10. Gera's standing go (2 uses) lets it run again"
expect 0 run "$FP2"

step "11. A read-only operation needs no approval but still leaves a receipt"
FP3=$("$BIN" plan list-configs --target staging --key keys/agent.key | fp)
expect 0 run "$FP3"

step "12. The journal"
expect 0 receipts list

step "13. CI replays every receipt"
expect 0 replay

step "14. A tampered copy of the journal is caught"
cp state/journal/receipts.jsonl tampered.jsonl
# Drop the second entry (an outcome): the hash chain breaks.
sed -i '2d' tampered.jsonl
expect 1 replay tampered.jsonl

step "15. The secret's value is nowhere in the state directory"
if grep -rq "$DEPLOY_TOKEN" state; then echo "demo: secret leaked" >&2; exit 1; fi
echo "no trace of DEPLOY_TOKEN's value under state/"

printf '\ndemo finished in %s\n' "$DIR"
