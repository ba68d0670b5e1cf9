// guild serve --parallel through the official openai client (tests/serve_parallel.sh runs it).
//
// Starts `guild serve --parallel 4` in one process and a `--parallel 1` server on the same tiny model, sends 8
// requests at once to the first (completions and chat, streamed and not, greedy and sampled with a seed, short and
// long prompts: the long ones prefill in several chunks beside the others' decode steps), then the same 8 one at a
// time to the second, and checks that every reply (text, finish reason, usage) is the same; the same 8 at once
// again against `--parallel 4` on the multi-process pipeline (a GPU worker and a CPU expert worker); that the
// requests overlapped in
// time (the server's per-request line says how many other sessions shared its steps, and /health's running
// count, sampled meanwhile, went above 1); that a streaming client that goes away frees its slot; and that
// --parallel refuses --spec and a batch smaller than itself.
//
// usage: node parallel.mjs GUILD MODEL WORKDIR
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import OpenAI from "openai";

const [GUILD, MODEL, WORK] = process.argv.slice(2);
let checks = 0;

function fail(msg) {
    console.log("FAIL: " + msg);
    process.exit(1);
}

function check(cond, msg) {
    checks++;
    if (!cond) fail(msg);
}

class Server {
    constructor(name, args) {
        this.logPath = path.join(WORK, name + ".log");
        this.log = fs.openSync(this.logPath, "w");
        this.p = spawn(GUILD, ["serve", "-m", MODEL, "--port", "0", "--threads", "2", ...args],
                       { stdio: ["ignore", "ignore", this.log] });
        this.exited = null;
        this.p.on("exit", (code) => { this.exited = code; });
    }

    text() {
        return fs.readFileSync(this.logPath, "utf8");
    }

    async ready() {
        const deadline = Date.now() + 60000;
        while (Date.now() < deadline) {
            if (this.exited !== null) fail(`guild serve exited with ${this.exited}:\n${this.text()}`);
            const m = /listening on http:\/\/[^ ]*:(\d+)\//.exec(this.text());
            if (m) {
                this.port = Number(m[1]);
                this.base = `http://127.0.0.1:${this.port}`;
                this.client = new OpenAI({ baseURL: this.base + "/v1", apiKey: "unused", maxRetries: 0 });
                return this;
            }
            await new Promise((r) => setTimeout(r, 20));
        }
        fail("guild serve did not start:\n" + this.text());
    }

    async health() {
        const r = await fetch(this.base + "/health");
        return r.json();
    }

    async stop() {
        if (this.exited !== null) return this.exited;
        const done = new Promise((r) => this.p.on("exit", r));
        this.p.kill("SIGTERM");
        const t = setTimeout(() => this.p.kill("SIGKILL"), 30000);
        const code = await done;
        clearTimeout(t);
        return code;
    }
}

const WORDS = ("the quick brown fox jumps over a lazy dog while seven small birds sing about rivers mountains " +
               "and the long road home through forests of pine").split(" ");
function longText(n, seed) {
    const out = [];
    for (let i = 0; i < n; i++) out.push(WORDS[(i * 7 + seed * 3) % WORDS.length]);
    return out.join(" ");
}

const SAMPLED = { temperature: 0.9, top_p: 0.9, seed: 42 };
// The 8 requests: [kind, streamed, body]
const REQUESTS = [
    ["completion", false, { prompt: "Once upon a time, in a land far away", max_tokens: 40, temperature: 0 }],
    ["completion", true, { prompt: "The weather today is", max_tokens: 48, ...SAMPLED }],
    ["chat", false, { messages: [{ role: "user", content: "Hi there" }], max_tokens: 32, temperature: 0 }],
    ["chat", true, { messages: [{ role: "system", content: "You are terse." },
                                { role: "user", content: longText(60, 1) }], max_tokens: 36, ...SAMPLED, seed: 7 }],
    ["completion", false, { prompt: longText(90, 2), max_tokens: 24, ...SAMPLED, seed: 3 }],
    ["completion", true, { prompt: "Once upon a time, in a land far away", max_tokens: 44, temperature: 0 }],
    ["chat", false, { messages: [{ role: "user", content: longText(40, 3) }], max_tokens: 40, ...SAMPLED }],
    ["chat", true, { messages: [{ role: "user", content: "Count: one two three" }], max_tokens: 30,
                     temperature: 0, stop: ["four"] }],
];

// A reply as {text, finish, usage}, however it came.
async function ask(client, [kind, stream, body]) {
    const model = "m.gguf";
    if (!stream) {
        const r = kind === "chat" ? await client.chat.completions.create({ model, ...body })
                                  : await client.completions.create({ model, ...body });
        const c = r.choices[0];
        return { text: kind === "chat" ? c.message.content : c.text, finish: c.finish_reason, usage: r.usage };
    }
    const opts = { model, ...body, stream: true, stream_options: { include_usage: true } };
    const s = kind === "chat" ? await client.chat.completions.create(opts) : await client.completions.create(opts);
    let text = "", finish = null, usage = null;
    for await (const ev of s) {
        if (ev.usage) usage = ev.usage;
        for (const c of ev.choices || []) {
            text += (kind === "chat" ? c.delta?.content : c.text) || "";
            if (c.finish_reason) finish = c.finish_reason;
        }
    }
    return { text, finish, usage };
}

function same(a, b) {
    return a.text === b.text && a.finish === b.finish && a.usage.prompt_tokens === b.usage.prompt_tokens &&
           a.usage.completion_tokens === b.usage.completion_tokens;
}

const par = new Server("parallel", ["--single-process", "--parallel", "4", "--batch", "16", "--queue", "8"]);
const one = new Server("one", ["--single-process", "--batch", "16"]);
const pipe = new Server("pipeline", ["--cpu-workers", "1", "--parallel", "4", "--batch", "16", "--queue", "8"]);
await par.ready();
await one.ready();
await pipe.ready();

// ---- 8 at once against --parallel 4, /health sampled meanwhile ----
let maxRunning = 0, maxWaiting = 0, polling = true;
const poller = (async () => {
    while (polling) {
        const h = await par.health();
        maxRunning = Math.max(maxRunning, h.running ?? 0);
        maxWaiting = Math.max(maxWaiting, h.waiting ?? 0);
        await new Promise((r) => setTimeout(r, 1));
    }
})();
const t0 = Date.now();
const together = await Promise.all(REQUESTS.map((q) => ask(par.client, q)));
const wall = Date.now() - t0;
polling = false;
await poller;

// ---- the same, one at a time, against --parallel 1 ----
const alone = [];
for (const q of REQUESTS) alone.push(await ask(one.client, q));
for (let i = 0; i < REQUESTS.length; i++) {
    const [kind, stream] = REQUESTS[i];
    check(together[i].text.length > 0 && together[i].usage.completion_tokens > 0, `request ${i}: empty reply`);
    check(same(together[i], alone[i]),
          `request ${i} (${kind}${stream ? ", streamed" : ""}) differs from the request alone:\n` +
          ` together ${JSON.stringify(together[i])}\n alone    ${JSON.stringify(alone[i])}`);
}
// ... at once against --parallel 4 on the pipeline (rows of several sequences in each step request)
const piped = await Promise.all(REQUESTS.map((q) => ask(pipe.client, q)));
for (let i = 0; i < REQUESTS.length; i++)
    check(same(piped[i], alone[i]), `request ${i} on the pipeline with --parallel 4 differs from the request alone:\n` +
          ` pipeline ${JSON.stringify(piped[i])}\n alone    ${JSON.stringify(alone[i])}`);
const pipeShared = [...pipe.text().matchAll(/steps shared with up to (\d+) other sessions/g)].map((m) => Number(m[1]));
check(pipeShared.length === 8 && Math.max(...pipeShared) >= 1, "the pipeline's requests shared no step: " +
      pipeShared.join(","));
// ... and once more with the GPU worker killed while they run: it is started again and each sequence's tokens are
// replayed into it, and the replies do not change
const gpuPid = () => Number([...pipe.text().matchAll(/gpu-worker: started, pid (\d+)/g)].pop()[1]);
const firstPid = gpuPid();
const inFlight = Promise.all(REQUESTS.map((q) => ask(pipe.client, q)));
for (let i = 0; i < 2000; i++) {
    const h = await pipe.health();
    if ((h.running ?? 0) >= 2) break;
    await new Promise((r) => setTimeout(r, 1));
}
process.kill(firstPid, "SIGKILL");
const survived = await inFlight;
for (let i = 0; i < REQUESTS.length; i++)
    check(same(survived[i], alone[i]), `request ${i} with the GPU worker killed differs from the request alone:\n` +
          ` pipeline ${JSON.stringify(survived[i])}\n alone    ${JSON.stringify(alone[i])}`);
check(gpuPid() !== firstPid, "the killed GPU worker was not started again:\n" + pipe.text());
check(await pipe.stop() === 0, "guild serve --parallel 4 (pipeline) did not exit cleanly on SIGTERM:\n" + pipe.text());
// ... and again one at a time against --parallel 4 itself (slots reused, prefixes kept per slot)
for (let i = 0; i < REQUESTS.length; i++) {
    const again = await ask(par.client, REQUESTS[i]);
    check(same(again, alone[i]), `request ${i} again on the --parallel 4 server differs`);
}

// ---- they overlapped ----
const shared = [...par.text().matchAll(/steps shared with up to (\d+) other sessions/g)].map((m) => Number(m[1]));
check(shared.length >= 8, `${shared.length} request lines with the sessions they shared steps with:\n${par.text()}`);
const maxShared = Math.max(...shared.slice(0, 8));
check(maxShared >= 1, "no request shared a step with another: " + shared.join(","));
check(maxRunning >= 2, `/health never showed more than ${maxRunning} running`);
check(maxRunning <= 4, `/health showed ${maxRunning} running with --parallel 4`);

// ---- a streaming client that goes away frees its slot ----
const ac = new AbortController();
const s = await par.client.completions.create(
    { model: "m.gguf", prompt: "Go on forever", max_tokens: 5000, ignore_eos: true, stream: true, temperature: 0 },
    { signal: ac.signal });
let got = 0;
try {
    for await (const ev of s) {
        if (++got === 3) ac.abort();
    }
} catch (e) {
    check(e.name === "AbortError" || ac.signal.aborted, "abort: " + e);
}
let freed = false;
for (let i = 0; i < 200 && !freed; i++) {
    const h = await par.health();
    freed = h.running === 0 && h.waiting === 0;
    if (!freed) await new Promise((r) => setTimeout(r, 25));
}
check(freed, "the slot of a client that went away was not freed: " + JSON.stringify(await par.health()));
check(/request \d+: .*cancelled/.test(par.text()), "no cancelled request in the log");
const after = await ask(par.client, REQUESTS[0]);
check(same(after, alone[0]), "a request after the cancelled one differs");

check(await par.stop() === 0, "guild serve --parallel 4 did not exit cleanly on SIGTERM:\n" + par.text());
check(await one.stop() === 0, "guild serve --parallel 1 did not exit cleanly on SIGTERM");

// ---- refusals ----
const bad = (args, want) => {
    const r = spawnSync(GUILD, ["serve", "-m", MODEL, "--port", "0", "--single-process", "--threads", "1", ...args],
                        { encoding: "utf8", timeout: 60000 });
    check(r.status !== 0 && r.stderr.includes(want), `guild serve ${args.join(" ")}: status ${r.status}, ` +
          `expected a message with "${want}":\n${r.stderr}`);
};
bad(["--parallel", "4", "--spec", "ngram"], "--parallel");
bad(["--parallel", "8", "--batch", "4"], "at least 8 tokens");

console.log(`PASS: ${checks} checks; 8 requests together in ${wall} ms, /health running up to ${maxRunning} ` +
            `(waiting up to ${maxWaiting}), a request shared steps with up to ${maxShared} others`);
