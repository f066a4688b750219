// The approval page (docs/adr/0048-approval-page.md). Everything shown is
// set as text, never as markup. The server keeps the statement a decision
// signs: this script only hands the passkey the challenge it is given.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);

  function b64urlToBytes(s) {
    const pad = "=".repeat((4 - (s.length % 4)) % 4);
    const bin = atob((s + pad).replace(/-/g, "+").replace(/_/g, "/"));
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out.buffer;
  }

  function bytesToB64url(buf) {
    const b = new Uint8Array(buf);
    let s = "";
    for (let i = 0; i < b.length; i++) s += String.fromCharCode(b[i]);
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  function say(text, error) {
    const m = $("message");
    m.textContent = text || "";
    m.className = error ? "error" : "";
  }

  async function call(method, path, body) {
    const init = { method: method, credentials: "same-origin", headers: {} };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const r = await fetch(path, init);
    let data = null;
    try { data = await r.json(); } catch (e) { data = null; }
    if (!r.ok) {
      const err = new Error((data && data.error) || ("HTTP " + r.status));
      err.status = r.status;
      throw err;
    }
    return data;
  }

  // get asks the passkey to sign the options' challenge and returns the
  // PublicKeyCredential as JSON.
  async function get(options) {
    const pk = options.publicKey;
    const req = {
      challenge: b64urlToBytes(pk.challenge),
      rpId: pk.rpId,
      timeout: pk.timeout,
      userVerification: pk.userVerification,
      allowCredentials: (pk.allowCredentials || []).map((c) => ({ type: c.type, id: b64urlToBytes(c.id) })),
    };
    const cred = await navigator.credentials.get({ publicKey: req });
    const r = cred.response;
    return {
      id: cred.id,
      rawId: bytesToB64url(cred.rawId),
      type: cred.type,
      response: {
        clientDataJSON: bytesToB64url(r.clientDataJSON),
        authenticatorData: bytesToB64url(r.authenticatorData),
        signature: bytesToB64url(r.signature),
        userHandle: r.userHandle ? bytesToB64url(r.userHandle) : undefined,
      },
      clientExtensionResults: {},
    };
  }

  // The enrolment's creation options, from the link's fragment
  // (approvalpage.EnrollURL), which no browser sends to a server.
  function enrolment() {
    if (location.pathname !== "/enroll" || location.hash.length < 2) return null;
    try {
      const bin = new Uint8Array(b64urlToBytes(location.hash.slice(1)));
      return JSON.parse(new TextDecoder().decode(bin));
    } catch (e) {
      return null;
    }
  }

  // create asks the authenticator for a new credential from the options
  // the service issued and returns the PublicKeyCredential as JSON.
  async function create(options) {
    const pk = options.publicKey;
    const req = {
      rp: pk.rp,
      user: { id: b64urlToBytes(pk.user.id), name: pk.user.name, displayName: pk.user.displayName },
      challenge: b64urlToBytes(pk.challenge),
      pubKeyCredParams: pk.pubKeyCredParams,
      timeout: pk.timeout,
      excludeCredentials: (pk.excludeCredentials || []).map((c) => ({ type: c.type, id: b64urlToBytes(c.id) })),
      authenticatorSelection: pk.authenticatorSelection,
      attestation: pk.attestation || "none",
    };
    const cred = await navigator.credentials.create({ publicKey: req });
    const r = cred.response;
    return {
      id: cred.id,
      rawId: bytesToB64url(cred.rawId),
      type: cred.type,
      response: {
        clientDataJSON: bytesToB64url(r.clientDataJSON),
        attestationObject: bytesToB64url(r.attestationObject),
        transports: r.getTransports ? r.getTransports() : [],
      },
      clientExtensionResults: {},
    };
  }

  function enrolPage() {
    const opts = enrolment();
    const pk = opts && opts.publicKey;
    if (!pk || !pk.rp || !pk.user || !pk.challenge) {
      say("This enrolment link is incomplete: copy the whole link prod-write passkey enroll printed.", true);
      return;
    }
    if (pk.rp.id !== location.hostname) {
      say("This enrolment is for " + pk.rp.id + ", not this page.", true);
      return;
    }
    $("enrol-principal").textContent = pk.user.name;
    $("enrol-rp").textContent = pk.rp.id;
    $("enrol").hidden = false;
    $("create").addEventListener("click", async () => {
      $("create").disabled = true;
      try {
        say("Waiting for your device…");
        const cred = await create(opts);
        const r = await call("POST", "/api/enroll", { credential: cred });
        $("enrolled-principal").textContent = 'id = "' + r.principal + '"';
        $("snippet").textContent = r.snippet;
        $("enrolled").hidden = false;
        $("create").hidden = true;
        say("Enrolled: passkey " + r.credential + " of " + r.principal + ".");
      } catch (e) {
        say("Not enrolled: " + e.message, true);
        $("create").disabled = false;
      }
    });
  }

  function fingerprint() {
    const m = location.pathname.match(/^\/approve\/([^/]+)$/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function rows(pairs) {
    const dl = el("dl");
    for (const [k, v, cls] of pairs) {
      dl.appendChild(el("dt", k));
      if (v instanceof Node) {
        const dd = el("dd", null, cls);
        dd.appendChild(v);
        dl.appendChild(dd);
      } else {
        dl.appendChild(el("dd", v, cls));
      }
    }
    return dl;
  }

  // words boxes each argv element on its own: the server sends each as a
  // visible.Word (quoted when it holds more than safe characters, hidden
  // code points escaped), and the boxes show where each starts and ends
  // (docs/adr/0062-showing-agent-text.md).
  function words(argv) {
    const span = el("span", null, "argv");
    argv.forEach((a, i) => {
      if (i > 0) span.appendChild(document.createTextNode(" "));
      span.appendChild(el("code", a, "arg"));
    });
    return span;
  }

  function list(items) {
    const ul = el("ul");
    for (const i of items) ul.appendChild(el("li", i));
    return ul;
  }

  function render(v) {
    const s = $("decision");
    s.replaceChildren();
    s.appendChild(el("h2", v.operation + " on " + v.target));
    s.appendChild(rows([
      ["Fingerprint", v.fingerprint, "fp"],
      ["Operation", v.operation + (v.mutating ? " (mutating)" : " (not mutating)")],
      ["Target", v.target],
      ["Argv", words(v.argv)],
      ["Cwd", v.cwd],
      ["Environment", v.env.length ? v.env.map((e) => e.name + " (" + e.kind + ")").join(", ") : "none"],
      ["Planned by", v.planner + " at " + v.created],
    ]));
    if (v.files.length) {
      s.appendChild(el("h2", "Files"));
      s.appendChild(list(v.files.map((f) => f.name + " = " + f.path + " (" + f.size + " bytes, " + f.sha256 + ")")));
    }
    for (const d of v.diffs) {
      s.appendChild(el("h2", "Diff of " + d.file));
      s.appendChild(el("pre", d.lines.join("\n")));
    }
    s.appendChild(el("h2", "Certainty record"));
    if (v.record) {
      s.appendChild(rows([
        ["Record", v.record.id, "fp"],
        ["Filed by", v.record.filer + " at " + v.record.issued],
        ["Expires", v.record.expires],
        ["Certainty", v.record.certainty],
        ["Summary", v.record.summary],
        ["Effect", v.record.effect],
        ["Blast radius", v.record.blast_radius],
        ["Rollback", v.record.rollback],
      ]));
    } else {
      s.appendChild(el("p", "No certainty record of this plan counts."));
    }
    if (v.record_problem) s.appendChild(el("p", "Does not count: " + v.record_problem, "error"));
    s.appendChild(el("h2", "Uses and expiry"));
    s.appendChild(list(v.uses));
    s.appendChild(el("h2", "Decided so far"));
    s.appendChild(v.answers.length ? list(v.answers.map((a) => a.verdict + " by " + a.by + " (" + a.via + ") at " + a.issued + (a.valid ? "" : " — does not count: " + a.why))) : el("p", "Nobody yet."));
    s.appendChild(el("h2", "Gate"));
    s.appendChild(el("p", v.gate === "open" ? "open: the plan may run" : v.gate + (v.gate_why ? ": " + v.gate_why : ""), v.gate === "open" ? "gate-open" : "gate-closed"));
    if (!v.closed) {
      s.appendChild(el("h2", "Your decision"));
      s.appendChild(el("p", v.veto_rule));
      const reason = el("textarea");
      reason.id = "reason";
      reason.maxLength = 1000;
      reason.placeholder = "Reason (optional)";
      s.appendChild(reason);
      const actions = el("div", null, "actions");
      const approve = el("button", "Approve with passkey", "approve");
      approve.id = "approve";
      const deny = el("button", "Deny with passkey", "deny");
      deny.id = "deny";
      approve.type = deny.type = "button";
      approve.addEventListener("click", () => decide(v.fingerprint, "approve"));
      deny.addEventListener("click", () => decide(v.fingerprint, "deny"));
      actions.append(approve, deny);
      s.appendChild(actions);
    }
    s.hidden = false;
  }

  async function load() {
    const fp = fingerprint();
    try {
      const who = await call("GET", "/api/session");
      $("who").textContent = "signed in as " + who.principal;
      $("login").hidden = true;
      if (!fp) { say("Open the link of a decision."); return; }
      render(await call("GET", "/api/decision/" + encodeURIComponent(fp)));
      say("");
    } catch (e) {
      if (e.status === 401) { $("login").hidden = false; $("decision").hidden = true; say(""); return; }
      say(e.message, true);
    }
  }

  async function signin() {
    try {
      say("Waiting for your passkey…");
      const opts = await call("POST", "/api/login/begin", {});
      const cred = await get(opts);
      await call("POST", "/api/login/finish", { credential: cred });
      await load();
    } catch (e) {
      say("Sign-in failed: " + e.message, true);
    }
  }

  async function decide(fp, decision) {
    const buttons = document.querySelectorAll(".actions button");
    buttons.forEach((b) => { b.disabled = true; });
    try {
      say("Waiting for your passkey…");
      const opts = await call("POST", "/api/challenge", { fingerprint: fp, decision: decision });
      const cred = await get(opts);
      const r = await call("POST", "/api/decide", { fingerprint: fp, decision: decision, reason: $("reason").value, credential: cred });
      await load();
      say("Recorded: " + r.decision + " by " + r.approver + (r.user_verified ? " (user verified)" : "") + ".");
    } catch (e) {
      say("Not recorded: " + e.message, true);
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (location.pathname === "/enroll") {
      enrolPage();
      return;
    }
    $("signin").addEventListener("click", signin);
    load();
  });
})();
