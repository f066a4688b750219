// The TypeScript MCP SDK as an agent's client of prod-write's MCP over
// HTTP, taking elicitation (elicit_ts_test.go runs it).
//
// It declares the elicitation capability ELICITATION, as the SDK's
// ClientCapabilities spell it: {"form":{},"url":{}} (form and URL mode),
// {"url":{}}, {"form":{}}, or {} (form, for backward compatibility). Its
// handler for elicitation/create is the SDK's own, set with
// ElicitRequestSchema, and accepts whatever it is asked, as a careless
// client would (it is the server's part never to ask this client anything
// it could answer for the approver), or, with ANSWER=never, never
// answers, as a user who leaves the link unopened or a client that went
// away. Completions are heard with ElicitationCompleteNotificationSchema.
//
// Every message the server sends the client is recorded as it arrives at
// the transport, before the SDK's Client checks it against the declared
// modes: so a form the SDK would refuse is seen all the same.
//
// It talks to the test in lines of JSON, one event each, on stdout, and
// waits for the test's word on stdin where the test acts in between:
//
//   {"event":"connected", sdkVersion, protocolVersion, capabilities (as sent)}
//   {"event":"planned", fingerprint}        then waits for "go"
//   {"event":"elicitation", params}          the handler was asked
//   {"event":"withdrawn"}                    with ANSWER=never, the server
//                                            withdrew an elicitation
//   {"event":"complete", elicitationId}      notifications/elicitation/complete
//   {"event":"progress", progress, message}  the wait's progress
//   {"event":"waited", result}               wait_for_decision's result
//   {"event":"wire", messages}               every server message, at the end
//
// then waits for "close" on stdin, closes the session and exits 0. Any
// failure is {"event":"error", error} and exit 1. "mark" on stdin, at any
// time, is answered {"event":"mark"}.
//
// Environment: NODE_MODULES (holding @modelcontextprotocol/sdk), MCP_URL,
// BEARER, PLAN_ARGS (plan_config-push's arguments, JSON), WAIT_SECONDS,
// ELICITATION (JSON), ANSWER ("never", or accept).
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import readline from 'node:readline';

const env = (k) => {
    const v = process.env[k];
    if (!v) throw new Error(`${k} is not set`);
    return v;
};
const say = (o) => process.stdout.write(JSON.stringify(o) + '\n');

// The test's words, one a line, taken in order; "mark" is answered at
// once, whatever the client is doing, with {"event":"mark"}: every event
// before it was the client's before the test's word.
const words = [];
const waiting = [];
let closed = false;
readline.createInterface({ input: process.stdin })
    .on('line', (line) => {
        const w = line.trim();
        if (w === 'mark') {
            say({ event: 'mark' });
        } else if (waiting.length > 0) {
            waiting.shift()(w);
        } else {
            words.push(w);
        }
    })
    .on('close', () => {
        closed = true;
        while (waiting.length > 0) waiting.shift()(undefined);
    });
async function hear(word) {
    const w = words.length > 0 ? words.shift() : closed ? undefined : await new Promise((resolve) => waiting.push(resolve));
    if (w !== word) {
        throw new Error(`the test said ${w === undefined ? 'nothing (stdin closed)' : JSON.stringify(w)}, want ${word}`);
    }
}

try {
    const require = createRequire(path.join(env('NODE_MODULES'), 'noop.js'));
    const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
    const { ElicitRequestSchema, ElicitationCompleteNotificationSchema } = require('@modelcontextprotocol/sdk/types.js');
    const sdkVersion = JSON.parse(readFileSync(path.join(env('NODE_MODULES'), '@modelcontextprotocol', 'sdk', 'package.json'), 'utf8')).version;

    const transport = new StreamableHTTPClientTransport(new URL(env('MCP_URL')), {
        requestInit: { headers: { Authorization: `Bearer ${env('BEARER')}` } },
    });
    // Protocol.connect chains a handler already set: this one sees every
    // message first, exactly as it came.
    const wire = [];
    transport.onmessage = (msg) => {
        if ('method' in msg) wire.push({ id: msg.id, method: msg.method, params: msg.params });
    };
    // The capabilities as the SDK's initialize request declared them.
    let declared;
    const send = transport.send.bind(transport);
    transport.send = (msg, opts) => {
        if (msg.method === 'initialize') declared = msg.params.capabilities;
        return send(msg, opts);
    };

    const elicitation = JSON.parse(env('ELICITATION'));
    const client = new Client({ name: 'prod-write-ts-elicit-test', version: '0' }, { capabilities: { elicitation } });
    const never = process.env.ANSWER === 'never';
    client.setRequestHandler(ElicitRequestSchema, async (req, extra) => {
        say({ event: 'elicitation', params: req.params });
        if (!never) return { action: 'accept' };
        // A user who never answers: only the server's withdrawal
        // (notifications/cancelled, which aborts the SDK's signal) ends it.
        return new Promise((_, reject) => {
            extra.signal.addEventListener('abort', () => {
                say({ event: 'withdrawn' });
                reject(new Error('withdrawn'));
            });
        });
    });
    client.setNotificationHandler(ElicitationCompleteNotificationSchema, async (n) => {
        say({ event: 'complete', elicitationId: n.params.elicitationId });
    });
    await client.connect(transport);
    say({ event: 'connected', sdkVersion, protocolVersion: transport.protocolVersion, capabilities: declared });

    const text = (res) => {
        if (res.isError) throw new Error(`tool error: ${JSON.stringify(res.content)}`);
        return res.structuredContent ?? JSON.parse(res.content[0].text);
    };
    const plan = text(await client.callTool({ name: 'plan_config-push', arguments: JSON.parse(env('PLAN_ARGS')) }));
    say({ event: 'planned', fingerprint: plan.fingerprint });
    await hear('go');

    const waited = await client.callTool(
        { name: 'wait_for_decision', arguments: { fingerprint: plan.fingerprint, timeout_seconds: Number(env('WAIT_SECONDS')) } },
        undefined,
        {
            onprogress: (p) => say({ event: 'progress', progress: p.progress, message: p.message }),
            timeout: 5 * 60 * 1000,
        },
    );
    say({ event: 'waited', result: text(waited) });

    await hear('close');
    say({ event: 'wire', messages: wire });
    await client.close();
    process.exit(0);
} catch (e) {
    say({ event: 'error', error: String(e?.stack ?? e) });
    process.exit(1);
}
