#!/usr/bin/env bash
# Installs what the tests need beyond Go. Idempotent.
#
# The DynamoDB and S3 tests run against real local servers, pinned here and
# installed into .cache/ (git-ignored), where pkg/testservers finds them:
#   dynalite   (DynamoDB, npm)  .cache/node_modules/.bin/dynalite
#   versitygw  (S3, Go)         .cache/bin/versitygw
# Keep the versions in step with pkg/testservers (DynaliteVersion,
# VersityGWVersion).
#
# The MCP tools' input schemas are compiled by a JSON Schema validator of
# another language, pinned here and installed beside dynalite:
#   ajv        (JSON Schema, npm)  .cache/node_modules/ajv
# Keep its version in step with pkg/mcpserver's schema_ajv_test.go (ajvVersion).
#
# MCP over HTTP is tested against the TypeScript MCP SDK as a client, its
# own OAuth support included, installed beside them:
#   @modelcontextprotocol/sdk  (npm)  .cache/node_modules/@modelcontextprotocol/sdk
# Keep its version in step with pkg/mcpserver's oauth_ts_test.go (tsSDKVersion).
#
# And against the MCP Inspector's CLI:
#   @modelcontextprotocol/inspector  (npm)  .cache/node_modules/@modelcontextprotocol/inspector
# Keep its version in step with pkg/mcpserver's inspector_test.go
# (inspectorVersion). Its package asks for node 22.19 or later; its CLI's
# tools/list over HTTP runs on node 20 as well (npm warns EBADENGINE).
#
# The receipts log's witnesses are tested against a witness not written
# here (ADR 0044), the transparency-dev omniwitness, built from
# the module proxy at a pinned pseudo-version (the module has no release):
#   omniwitness  (Go)  .cache/bin/omniwitness
# Keep its version in step with pkg/testservers (OmniwitnessVersion).
# `scripts/test-deps.sh omniwitness` installs it alone.
set -euo pipefail
cd "$(dirname "$0")/.."

DYNALITE_VERSION=4.0.0
AJV_VERSION=8.20.0
MCP_TS_SDK_VERSION=1.32.2
MCP_INSPECTOR_VERSION=2.12.0
VERSITYGW_VERSION=v1.8.0
OMNIWITNESS_VERSION=v0.0.0-20260720115447-2e1c6971d19e

# omniwitness: go install of the pinned module version, its own go.sum
# (none of its modules enter this module's).
install_omniwitness() {
	have=$(go version -m .cache/bin/omniwitness 2>/dev/null | awk '$1 == "mod" { print $3 }' || true)
	if [ "$have" != "$OMNIWITNESS_VERSION" ]; then
		echo "test-deps: installing omniwitness $OMNIWITNESS_VERSION into .cache/bin" >&2
		GOBIN="$PWD/.cache/bin" go install "github.com/transparency-dev/witness/cmd/omniwitness@$OMNIWITNESS_VERSION"
	fi
}
if [ "${1:-}" = omniwitness ]; then
	install_omniwitness
	exit 0
fi

go mod download

# dynalite: exact version, no install scripts (its optional native LevelDB
# binding is not needed: the tests keep tables in memory).
have=$(node -p 'require("./.cache/node_modules/dynalite/package.json").version' 2>/dev/null || true)
if [ "$have" != "$DYNALITE_VERSION" ]; then
	echo "test-deps: installing dynalite $DYNALITE_VERSION into .cache/" >&2
	npm install --prefix .cache --save-exact --ignore-scripts --no-audit --no-fund \
		"dynalite@$DYNALITE_VERSION" >&2
fi

# ajv: exact version, no install scripts (it has none; its four
# dependencies are plain JavaScript).
have=$(node -p 'require("./.cache/node_modules/ajv/package.json").version' 2>/dev/null || true)
if [ "$have" != "$AJV_VERSION" ]; then
	echo "test-deps: installing ajv $AJV_VERSION into .cache/" >&2
	npm install --prefix .cache --save-exact --ignore-scripts --no-audit --no-fund \
		"ajv@$AJV_VERSION" >&2
fi

# The TypeScript MCP SDK: exact version, no install scripts (the client
# side needs none).
have=$(node -p 'require("./.cache/node_modules/@modelcontextprotocol/sdk/package.json").version' 2>/dev/null || true)
if [ "$have" != "$MCP_TS_SDK_VERSION" ]; then
	echo "test-deps: installing @modelcontextprotocol/sdk $MCP_TS_SDK_VERSION into .cache/" >&2
	npm install --prefix .cache --save-exact --ignore-scripts --no-audit --no-fund \
		"@modelcontextprotocol/sdk@$MCP_TS_SDK_VERSION" >&2
fi

# The MCP Inspector: exact version, no install scripts (its CLI needs
# none; its web UI, which would, is not run).
have=$(node -p 'require("./.cache/node_modules/@modelcontextprotocol/inspector/package.json").version' 2>/dev/null || true)
if [ "$have" != "$MCP_INSPECTOR_VERSION" ]; then
	echo "test-deps: installing @modelcontextprotocol/inspector $MCP_INSPECTOR_VERSION into .cache/" >&2
	npm install --prefix .cache --save-exact --ignore-scripts --no-audit --no-fund \
		"@modelcontextprotocol/inspector@$MCP_INSPECTOR_VERSION" >&2
fi

# versitygw: go install of the pinned module version (posix backend, with
# versioning and object lock).
have=$(go version -m .cache/bin/versitygw 2>/dev/null | awk '$1 == "mod" { print $3 }' || true)
if [ "$have" != "$VERSITYGW_VERSION" ]; then
	echo "test-deps: installing versitygw $VERSITYGW_VERSION into .cache/bin" >&2
	GOBIN="$PWD/.cache/bin" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
fi

install_omniwitness

# apt_install WHAT PACKAGE… installs Debian's packages as root when a test
# needs them and they are missing, or says how to (every later test that
# needs them then skips, or fails under PROD_WRITE_REQUIRE_SERVERS=1).
apt_install() {
	what=$1
	shift
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test-deps: installing $* (apt)" >&2
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
	else
		echo "test-deps: $* missing; install Debian's $* as root (apt-get install $*) for $what" >&2
	fi
}

# Debian's chromium, for the approval page's browser test (pkg/cli's
# TestApprovalPageInChromium, driven over the DevTools protocol by
# chromedp).
command -v chromium >/dev/null 2>&1 || apt_install "the browser test" chromium

# git, whose repositories replay reads as the protected branch's history
# (receipts' TestReplayJudgesByTheBranch builds them with the real git).
command -v git >/dev/null 2>&1 || apt_install "the branch history tests" git

# Debian's PostgreSQL, for the real-tools deployment test (tests/deploy's
# TestPsqlMigrationThroughTheService): a private cluster made with
# /usr/lib/postgresql/N/bin/initdb and pg_ctl as the postgres account the
# package creates, migrated through Debian's psql (pg_wrapper, run by its
# path: docs/adr/0060-programs-run-by-their-path.md).
if ! [ -x /usr/bin/psql ] || ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
	apt_install "the psql deployment test" postgresql postgresql-client
fi
