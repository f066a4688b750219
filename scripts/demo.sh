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

step "4. Smith, an operator, files a certainty record"
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

step "16. The same story through the runner service (docs/DESIGN.md §13)"
# A deployment runs \`prod-write serve\` as its own account and programs as
# each operation's run_as account (docs/DEPLOYMENT.md). Here, in one
# temporary directory: as root, programs run as nobody; as anyone else the
# demo says explicitly that it has no second account (allow_shared_account).
mkdir -p creds srv/svc client && chmod 0700 creds
printf 'from-the-service-credentials' > creds/DEPLOY_TOKEN && chmod 0600 creds/DEPLOY_TOKEN
if [ "$(id -u)" -eq 0 ]; then RUNAS=nobody SHARED=false; chmod 0755 "$DIR"; chmod 0777 srv/svc
else RUNAS=$(id -un) SHARED=true; fi
cat >> prod-write.toml <<EOF2

[service]
socket = "$DIR/pw.sock"
credentials = "creds"
allow_shared_account = $SHARED
EOF2
cat > operations/service.toml <<EOF2
[[operation]]
name = "svc-push"
description = "Install a reviewed config file, run by the service as $RUNAS"
program = "install"
args = ["-m", "0644", "{file.config}", "$DIR/srv/svc/{param.service}.toml"]
targets = ["staging"]
run_as = "$RUNAS"
[operation.params.service]
pattern = "^[a-z][a-z0-9-]{0,30}$"
[operation.files.config]
max_size = "1MiB"
[operation.env]
secret = ["DEPLOY_TOKEN"]
EOF2
printf '[service]\nsocket = "%s/pw.sock"\n' "$DIR" > client/prod-write.toml
echo "\$ prod-write history record   (the history replay judges runs by: the service loads only what it holds)"
"$BIN" history record
echo "\$ prod-write serve &   (service log in serve.log)"
"$BIN" serve > serve.log 2>&1 &
SERVE=$!
trap 'kill -INT $SERVE 2>/dev/null' EXIT
for _ in $(seq 100); do [ -S pw.sock ] && break; sleep 0.05; done
echo "--- the client's whole configuration (client/prod-write.toml):"; cat client/prod-write.toml
export PROD_WRITE_CONFIG=$DIR/client/prod-write.toml
export DEPLOY_TOKEN=the-callers-value-which-the-service-never-takes
expect 0 plan svc-push --target staging --param service=api --file config=api.toml --key keys/agent.key > plan.out; cat plan.out
FP4=$(fp < plan.out)
expect 0 file "$FP4" --key keys/smith.key --summary "Install api's config via the service" \
  --effect "api reads the file" --blast-radius "api in staging" --rollback "install the previous file" --certainty high
expect 0 decide "$FP4" approve --key keys/alice.key
expect 0 run "$FP4"
echo "--- srv/svc/api.toml, written by the program as $RUNAS:"; ls -l srv/svc/api.toml
expect 77 run "$FP4"
expect 0 replay
kill -INT $SERVE; wait $SERVE 2>/dev/null; trap - EXIT
echo "--- the service's log:"; cat serve.log
unset PROD_WRITE_CONFIG

printf '\ndemo finished in %s\n' "$DIR"
