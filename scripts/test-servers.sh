#!/usr/bin/env bash
# Starts the local DynamoDB (dynalite) and S3 (versitygw) servers that the
# tests use, for trying the distributed backends by hand. The tests do not
# need this script: pkg/testservers starts its own servers on free ports.
#
#   ./scripts/test-servers.sh            # dynalite on :4567, versitygw on :7070
#   DYNAMO_PORT=8000 S3_PORT=9000 ./scripts/test-servers.sh
#
# It prints the prod-write.toml sections and environment to use, and stops
# both servers on Ctrl-C. Data lives in a temporary directory, removed on
# exit. Install the servers first with ./scripts/test-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

DYNAMO_PORT=${DYNAMO_PORT:-4567}
S3_PORT=${S3_PORT:-7070}
dynalite=.cache/node_modules/.bin/dynalite
versitygw=.cache/bin/versitygw
for b in "$dynalite" "$versitygw"; do
	[ -x "$b" ] || { echo "test-servers: $b is missing: run ./scripts/test-deps.sh" >&2; exit 1; }
done

dir=$(mktemp -d)
access=local$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
secret=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
mkdir -p "$dir/s3" "$dir/versions"
pids=()
cleanup() {
	kill "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

"$dynalite" --host 127.0.0.1 --port "$DYNAMO_PORT" >"$dir/dynalite.log" 2>&1 &
pids+=($!)
# The root credentials go in its environment, not on its command line,
# which any local user can read.
ROOT_ACCESS_KEY_ID=$access ROOT_SECRET_ACCESS_KEY=$secret \
	"$versitygw" --port "127.0.0.1:$S3_PORT" --quiet \
	--health /health posix --versioning-dir "$dir/versions" "$dir/s3" >"$dir/versitygw.log" 2>&1 &
pids+=($!)

for _ in $(seq 100); do
	if curl -s -o /dev/null "http://127.0.0.1:$DYNAMO_PORT/" && curl -sf -o /dev/null "http://127.0.0.1:$S3_PORT/health"; then
		break
	fi
	sleep 0.1
done

cat <<EOF
dynalite on http://127.0.0.1:$DYNAMO_PORT, versitygw on http://127.0.0.1:$S3_PORT (Ctrl-C stops both)

export AWS_ACCESS_KEY_ID=$access
export AWS_SECRET_ACCESS_KEY=$secret
export AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true

# prod-write.toml
[store]
backend = "dynamodb"
table = "prod-write"
endpoint = "http://127.0.0.1:$DYNAMO_PORT"

# Make the bucket with object lock first, e.g. with the aws CLI:
#   aws --endpoint-url http://127.0.0.1:$S3_PORT s3api create-bucket --bucket receipts --object-lock-enabled-for-bucket
[archive]
bucket = "receipts"
prefix = "$(hostname)"
endpoint = "http://127.0.0.1:$S3_PORT"
EOF
wait
