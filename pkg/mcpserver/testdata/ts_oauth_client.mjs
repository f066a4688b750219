// The TypeScript MCP SDK as a client of prod-write's MCP over HTTP behind a
// real authorization server (oauth_ts_test.go runs it).
//
// The SDK's own OAuth support does the work: ClientCredentialsProvider
// (client_credentials, client_secret_basic) as the transport's
// authProvider; on the server's 401 the SDK reads the challenge's
// resource_metadata, fetches that metadata, discovers the authorization
// server it names and asks it for a token for the metadata's resource.
//
// Then, for each protocol version the SDK supports (SUPPORTED_PROTOCOL_VERSIONS,
// LATEST_PROTOCOL_VERSION first), one session that offers it: the SDK's
// Client offers LATEST_PROTOCOL_VERSION only, so the initialize request it
// sends is given the version to offer on its way to the transport; all else
// (the SDK's check of the answer, the MCP-Protocol-Version header after it,
// listing and calling) is the SDK's.
//
// Environment: NODE_MODULES (holding @modelcontextprotocol/sdk), MCP_URL,
// ISSUER, CLIENT_ID, CLIENT_SECRET, SCOPE. Prints one JSON object on
// stdout; exits non-zero on any error.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const env = (k) => {
    const v = process.env[k];
    if (!v) throw new Error(`${k} is not set`);
    return v;
};
const require = createRequire(path.join(env('NODE_MODULES'), 'noop.js'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { ClientCredentialsProvider } = require('@modelcontextprotocol/sdk/client/auth-extensions.js');
const { LATEST_PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS } = require('@modelcontextprotocol/sdk/types.js');
// The package's own package.json: its exports map ./package.json elsewhere.
const sdkVersion = JSON.parse(readFileSync(path.join(env('NODE_MODULES'), '@modelcontextprotocol', 'sdk', 'package.json'), 'utf8')).version;

const url = new URL(env('MCP_URL'));

// fetched records every request the SDK makes, with its answer's status.
const fetched = [];
const recordingFetch = async (input, init) => {
    const res = await fetch(input, init);
    const u = typeof input === 'string' ? input : input.url ?? String(input);
    fetched.push({ method: init?.method ?? 'GET', url: String(u), status: res.status });
    return res;
};

function provider() {
    return new ClientCredentialsProvider({
        clientId: env('CLIENT_ID'),
        clientSecret: env('CLIENT_SECRET'),
        scope: env('SCOPE'),
        expectedIssuer: env('ISSUER'),
    });
}

// connect opens a session; offer, when set, is the protocol version the
// initialize request offers.
async function connect(authProvider, offer) {
    const transport = new StreamableHTTPClientTransport(url, { authProvider, fetch: recordingFetch });
    if (offer) {
        const send = transport.send.bind(transport);
        transport.send = (msg, opts) => {
            if (msg.method === 'initialize') {
                msg = { ...msg, params: { ...msg.params, protocolVersion: offer } };
            }
            return send(msg, opts);
        };
    }
    const client = new Client({ name: 'prod-write-ts-oauth-test', version: '0' });
    await client.connect(transport);
    return { client, transport };
}

const out = { sdkVersion, latest: LATEST_PROTOCOL_VERSION, supported: SUPPORTED_PROTOCOL_VERSIONS, versions: [] };

// The SDK as it is: its OAuth from the first 401, its own offer.
const auth = provider();
{
    const { client, transport } = await connect(auth);
    out.discovery = fetched.slice();
    out.defaultNegotiated = transport.protocolVersion;
    const tools = await client.listTools();
    out.tools = tools.tools.map((t) => t.name);
    const res = await client.callTool({ name: 'list_operations', arguments: {} });
    out.listOperations = { isError: res.isError ?? false, content: res.content?.length ?? 0 };
    await client.close();
}

for (const offered of SUPPORTED_PROTOCOL_VERSIONS) {
    const rec = { offered };
    try {
        const { client, transport } = await connect(auth, offered);
        rec.negotiated = transport.protocolVersion;
        rec.tools = (await client.listTools()).tools.length;
        await client.close();
    } catch (e) {
        rec.error = String(e?.message ?? e);
    }
    out.versions.push(rec);
}

process.stdout.write(JSON.stringify(out) + '\n');
