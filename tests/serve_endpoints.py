#!/usr/bin/env python3
"""guild serve's side endpoints end to end (tests/serve_endpoints.sh runs it): GET /metrics, POST /tokenize and
POST /detokenize, and log probabilities in completions and chat, against a real server on a tiny guild-mkmodel
model, with the standard library only.

Checks: /metrics parses strictly as Prometheus's text format 0.0.4 (every sample's family has one TYPE and one
HELP line before it, names and labels are well-formed, values numeric, no sample twice, counters end in _total,
histogram buckets cumulative with le="+Inf" equal to _count) and its counters grow by what a request did;
/tokenize equals `guild tokenize`, /detokenize inverts it, bad bodies get 400 naming the field; logprobs agree
with a log-softmax of `guild run --logits-out`'s rows, the greedy token's is the largest, top lists are sorted,
streamed and whole replies carry the same values, the limits are enforced.

usage: serve_endpoints.py BUILDDIR WORKDIR
"""
import json
import math
import os
import re
import signal
import struct
import subprocess
import sys
import time

B, T = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_lib  # noqa: E402
from serve_lib import check, fail  # noqa: E402,F401

GUILD = serve_lib.GUILD = os.path.join(B, "guild")
serve_lib.T = T
MODEL = os.path.join(T, "m.gguf")


class Server(serve_lib.Server):
    """A `guild serve` of MODEL (tests/serve_lib.py) whose streams must end with [DONE]."""

    def __init__(self, name, *args):
        super().__init__(name, MODEL, *args)

    def stream(self, path, body):
        """The parsed data events of a streamed reply (before [DONE], which must come)."""
        events, done = super().stream(path, body)
        check(done, "%s stream: no [DONE]" % path)
        return events


def expect_error(srv, path, body, status, fragment, param=None, method="POST", headers=None):
    st, _, data = srv.request(method, path, body, headers)
    check(st == status, "%s %s %r: status %d, expected %d: %s" % (method, path, body, st, status, data[:300]))
    err = json.loads(data.decode("utf-8"))["error"]
    check(fragment in err["message"], "%s %s: message %r lacks %r" % (method, path, err["message"], fragment))
    if param is not None:
        check(err["param"] == param, "%s %s: param %r, expected %r" % (method, path, err["param"], param))


# ---- Prometheus's text format, parsed strictly ------------------------------------------------------------
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
SAMPLE = re.compile(r"^(%s)(?:\{(.*)\})? (\S+)(?: (-?\d+))?$" % NAME)
LABELS = re.compile(r"(?:%s(?:,%s)*,?)?" % (LABEL, LABEL))


def parse_value(s, where):
    if s in ("+Inf", "-Inf", "NaN"):
        return float(s.replace("Inf", "inf").replace("NaN", "nan"))
    check(re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", s) is not None, "%s: value %r is not a number"
          % (where, s))
    return float(s)


def parse_metrics(text):
    """{(sample name, frozenset of labels): value}, and {family: type}, failing on any deviation."""
    check(text.endswith("\n"), "/metrics: the last line does not end with a line feed")
    types, helps, samples, seen_families = {}, {}, {}, []
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = "/metrics line %d %r" % (n, line)
        if not line:
            continue
        if line.startswith("#"):
            m = re.fullmatch(r"# (HELP|TYPE) (%s) (.*)" % NAME, line)
            if not m:
                check(not line.startswith("# HELP") and not line.startswith("# TYPE"), where + ": malformed")
                continue
            kind, fam, rest = m.groups()
            if kind == "TYPE":
                check(fam not in types, where + ": a second TYPE line")
                check(rest in ("counter", "gauge", "histogram", "summary", "untyped"), where + ": unknown type")
                types[fam] = rest
                seen_families.append(fam)
            else:
                check(fam not in helps, where + ": a second HELP line")
                check(rest.strip() != "", where + ": empty HELP")
                helps[fam] = rest
            continue
        m = SAMPLE.match(line)
        check(m is not None, where + ": not a sample line")
        name, block, value = m.group(1), m.group(2) or "", parse_value(m.group(3), where)
        check(LABELS.fullmatch(block) is not None, where + ": malformed labels")
        labels = re.findall(LABEL, block)
        fam = family_of(name, types)
        check(fam is not None, where + ": no TYPE line for %s before it" % name)
        check(fam in helps, where + ": no HELP line for %s" % fam)
        check(len(set(k for k, _ in labels)) == len(labels), where + ": a label twice")
        key = (name, frozenset(labels))
        check(key not in samples, where + ": the same sample twice")
        if types[fam] == "counter":
            check(name.endswith("_total"), where + ": a counter not named *_total")
            check(value >= 0, where + ": a negative counter")
        samples[key] = value
    # histograms: cumulative buckets ending with +Inf = _count
    for fam, ty in types.items():
        if ty != "histogram":
            continue
        buckets = sorted(((float(dict(k[1])["le"].replace("+Inf", "inf")), v) for k, v in samples.items()
                          if k[0] == fam + "_bucket"))
        check(buckets and math.isinf(buckets[-1][0]), "/metrics: %s has no le=\"+Inf\" bucket" % fam)
        check(all(buckets[i][1] <= buckets[i + 1][1] for i in range(len(buckets) - 1)),
              "/metrics: %s's buckets are not cumulative" % fam)
        check(samples.get((fam + "_count", frozenset())) == buckets[-1][1], "/metrics: %s_count != +Inf" % fam)
        check((fam + "_sum", frozenset()) in samples, "/metrics: %s has no _sum" % fam)
    return samples, types


def family_of(name, types):
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and types.get(name[:-len(suffix)]) in ("histogram", "summary"):
            return name[:-len(suffix)]
    return None


def metrics(srv, headers=None):
    st, hdrs, data = srv.request("GET", "/metrics", headers=headers)
    check(st == 200, "GET /metrics: status %d: %r" % (st, data[:200]))
    check(hdrs.get("content-type", "").startswith("text/plain; version=0.0.4"),
          "GET /metrics: content type %r" % hdrs.get("content-type"))
    return parse_metrics(data.decode("utf-8"))


def val(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    check(key in samples, "/metrics: no sample %s%r" % (name, labels))
    return samples[key]


# ---- the model ------------------------------------------------------------------------------------------
mk = subprocess.run([os.path.join(B, "tools", "guild-mkmodel"), "--arch", "qwen3moe", "--layers", "2", "--embd",
                     "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "64", "--experts", "8",
                     "--experts-used", "2", "--expert-ff", "128", "--ctx", "512", "--vocab", "796", "--type",
                     "Q8_0", "--seed", "5", "-q", "-o", MODEL], capture_output=True)
if mk.returncode != 0:
    fail("guild-mkmodel: " + mk.stderr.decode(errors="replace"))
N_VOCAB = 796
PROMPT = "Once upon a time, in a land far away"
C, CH = "/v1/completions", "/v1/chat/completions"

srv = Server("main", "--single-process")

# ---- /metrics before and after requests --------------------------------------------------------------------
m0, types = metrics(srv)
for fam, ty in (("guild_requests_total", "counter"), ("guild_generated_tokens_total", "counter"),
                ("guild_prompt_tokens_total", "counter"), ("guild_prefill_seconds_total", "counter"),
                ("guild_decode_seconds_total", "counter"), ("guild_requests_waiting", "gauge"),
                ("guild_requests_running", "gauge"), ("guild_kv_cache_used_positions", "gauge"),
                ("guild_kv_cache_capacity_positions", "gauge"), ("guild_cpu_expert_wait_seconds_total", "counter"),
                ("guild_worker_restarts_total", "counter"), ("guild_request_duration_seconds", "histogram")):
    check(types.get(fam) == ty, "/metrics: %s is %r, expected %s" % (fam, types.get(fam), ty))
check(val(m0, "guild_kv_cache_capacity_positions") == 512, "KV capacity is not the context (512)")
r = srv.json(C, {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "ignore_eos": True})
n_prompt = r["usage"]["prompt_tokens"]
srv.json(C, {"prompt": PROMPT, "max_tokens": 0.5}, status=400)
m1, _ = metrics(srv)
check(val(m1, "guild_requests_total", endpoint="completions", outcome="length") -
      val(m0, "guild_requests_total", endpoint="completions", outcome="length") == 1, "requests_total{length} +1")
check(val(m1, "guild_requests_total", endpoint="completions", outcome="invalid") -
      val(m0, "guild_requests_total", endpoint="completions", outcome="invalid") == 1, "requests_total{invalid} +1")
check(val(m1, "guild_generated_tokens_total") - val(m0, "guild_generated_tokens_total") == 12,
      "generated_tokens_total did not grow by 12")
check(val(m1, "guild_prompt_tokens_total") - val(m0, "guild_prompt_tokens_total") == n_prompt,
      "prompt_tokens_total did not grow by %d" % n_prompt)
check(val(m1, "guild_prefill_seconds_total") > val(m0, "guild_prefill_seconds_total"), "prefill seconds did not grow")
check(val(m1, "guild_decode_seconds_total") > val(m0, "guild_decode_seconds_total"), "decode seconds did not grow")
check(val(m1, "guild_engine_busy_seconds_total") > val(m0, "guild_engine_busy_seconds_total"), "busy did not grow")
check(val(m1, "guild_request_duration_seconds_count") == val(m0, "guild_request_duration_seconds_count") + 1,
      "the duration histogram did not count the request")
check(val(m1, "guild_kv_cache_used_positions") == n_prompt + 11, "KV used %r, expected %d (prompt + 11 fed back)"
      % (val(m1, "guild_kv_cache_used_positions"), n_prompt + 11))
check(val(m1, "guild_requests_running") == 0 and val(m1, "guild_requests_waiting") == 0, "idle gauges")
# a second request reusing the prompt: cached tokens count
srv.stream(C, {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "ignore_eos": True})
m2, _ = metrics(srv)
check(val(m2, "guild_requests_total", endpoint="completions", outcome="length") -
      val(m1, "guild_requests_total", endpoint="completions", outcome="length") == 1, "a stream is counted")
check(val(m2, "guild_prompt_tokens_cached_total") - val(m1, "guild_prompt_tokens_cached_total") == n_prompt - 1,
      "cached tokens did not grow by %d" % (n_prompt - 1))
check(val(m2, "guild_generated_tokens_total") - val(m1, "guild_generated_tokens_total") == 4, "streamed tokens")

# ---- /tokenize and /detokenize -------------------------------------------------------------------------
cli = subprocess.run([GUILD, "tokenize", "-m", MODEL, "--ids"], input=PROMPT.encode(), capture_output=True)
check(cli.returncode == 0, "guild tokenize: " + cli.stderr.decode(errors="replace"))
want = [int(x) for x in cli.stdout.split()]
got = srv.json("/tokenize", {"content": PROMPT, "add_special": True, "parse_special": False})["tokens"]
check(got == want, "/tokenize %r, guild tokenize %r" % (got, want))
check(len(got) == n_prompt, "/tokenize with add_special gives %d tokens, the completion's prompt %d" %
      (len(got), n_prompt))
cli = subprocess.run([GUILD, "tokenize", "-m", MODEL, "--ids", "--no-bos"], input=PROMPT.encode(),
                     capture_output=True)
plain = srv.json("/tokenize", {"content": PROMPT})["tokens"]
check(plain == [int(x) for x in cli.stdout.split()], "/tokenize without add_special != guild tokenize --no-bos")
back = srv.json("/detokenize", {"tokens": plain})["content"]
check(back == PROMPT, "/detokenize(/tokenize(x)) = %r" % back)
pieces = srv.json("/tokenize", {"content": PROMPT, "with_pieces": True})["tokens"]
check([p["id"] for p in pieces] == plain, "with_pieces ids")
check("".join(p["piece"] if isinstance(p["piece"], str) else bytes(p["piece"]).decode("utf-8", "replace")
              for p in pieces) == PROMPT, "with_pieces: the pieces do not concatenate to the text")
check(srv.json("/tokenize", {"content": ""})["tokens"] == [], "an empty content gives no tokens")
check(srv.json("/detokenize", {"tokens": []})["content"] == "", "no tokens give an empty content")
# the ids of a text prompt as a token prompt: the same reply
a = srv.json(C, {"prompt": PROMPT, "max_tokens": 6, "temperature": 0})
b = srv.json(C, {"prompt": want, "max_tokens": 6, "temperature": 0})
check(a["choices"][0]["text"] == b["choices"][0]["text"], "a prompt as /tokenize's ids gives another reply")
for body, frag, param in (({}, "content: missing", "content"), ({"content": 5}, "must be a string", "content"),
                          ({"content": "x", "add_special": 1}, "true or false", "add_special"),
                          ({"content": "x", "parse_special": "yes"}, "true or false", "parse_special")):
    expect_error(srv, "/tokenize", body, 400, frag, param)
for body, frag in (({}, "tokens: missing"), ({"tokens": "1 2"}, "must be an array"),
                   ({"tokens": [1, N_VOCAB]}, "tokens[1]: must be a token id"), ({"tokens": [-1]}, "tokens[0]"),
                   ({"tokens": [1.5]}, "tokens[0]"), ({"tokens": [True]}, "tokens[0]")):
    expect_error(srv, "/detokenize", body, 400, frag, "tokens")
expect_error(srv, "/tokenize", b"{not json", 400, "not valid JSON")
expect_error(srv, "/detokenize", b"[1, 2]", 400, "must be a JSON object")
expect_error(srv, "/tokenize", b'{"content": "a", "content": "b"}', 400, "not valid JSON")

# ---- log probabilities ---------------------------------------------------------------------------------
N_LP = 8
logits_path, ids_path = os.path.join(T, "run.logits"), os.path.join(T, "run.ids")
run = subprocess.run([GUILD, "run", "-m", MODEL, "-p", PROMPT, "-n", str(N_LP), "--temp", "0", "--threads", "1",
                      "--ignore-eos", "--single-process", "--logits-out", logits_path, "--ids-out", ids_path],
                     capture_output=True, timeout=120)
check(run.returncode == 0, "guild run: " + run.stderr.decode(errors="replace"))
raw = open(logits_path, "rb").read()
check(len(raw) == N_LP * N_VOCAB * 4, "guild run --logits-out wrote %d bytes" % len(raw))
run_ids = [int(x) for x in open(ids_path).read().split()]
direct = []  # per position: the log-softmax of guild run's row, in double
for r in range(N_LP):
    row = struct.unpack_from("<%df" % N_VOCAB, raw, r * N_VOCAB * 4)
    m = max(row)
    lse = m + math.log(sum(math.exp(x - m) for x in row))
    lp = [x - lse for x in row]
    check(abs(sum(math.exp(x) for x in lp) - 1) < 1e-9, "the full distribution does not sum to 1")
    direct.append(lp)


def check_entry_order(name, lps):
    check(all(v <= 0 for v in lps), "%s: a log probability above 0: %r" % (name, lps))
    check(lps == sorted(lps, reverse=True), "%s: the top list is not sorted: %r" % (name, lps))


# completions, legacy shape, against guild run's rows
GREEDY = {"prompt": PROMPT, "max_tokens": N_LP, "temperature": 0, "ignore_eos": True}
rc = srv.json(C, dict(GREEDY, logprobs=5))
lp = rc["choices"][0]["logprobs"]
check(rc["usage"]["completion_tokens"] == N_LP and all(len(lp[k]) == N_LP for k in
      ("tokens", "token_logprobs", "top_logprobs", "text_offset")), "completions logprobs: %d entries" % N_LP)
tb = rc["choices"][0]["text"].encode()
offs = lp["text_offset"] + [len(tb)]
check(offs[0] == 0 and offs == sorted(offs), "text_offset %r is not increasing from 0" % lp["text_offset"])
# offsets count the generated bytes: they are the text's until a byte that is not UTF-8 became U+FFFD there
exact = tb.find("\ufffd".encode()) if "\ufffd".encode() in tb else len(tb)
for i in range(N_LP):
    seg = tb[offs[i]:offs[i + 1]]
    # (a control token's text is not in the reply's)
    if seg and offs[i + 1] <= exact and "\ufffd" not in lp["tokens"][i]:
        check(seg.decode() == lp["tokens"][i], "token %d %r is not the text at its offset %r" % (i, lp["tokens"][i],
                                                                                               seg))
    want = direct[i][run_ids[i]]
    check(abs(lp["token_logprobs"][i] - want) < 1e-4 * max(1, abs(want)), "position %d: logprob %r, direct %r" %
          (i, lp["token_logprobs"][i], want))
    top = list(lp["top_logprobs"][i].values())
    check(len(top) <= 5 and len(top) >= 1, "position %d: %d top entries" % (i, len(top)))
    check_entry_order("completions position %d" % i, top)
    check(abs(top[0] - lp["token_logprobs"][i]) < 1e-6, "position %d: greedy token's logprob %r is not the max %r" %
          (i, lp["token_logprobs"][i], top[0]))
    best5 = sorted(direct[i], reverse=True)[:5]
    # two of the five with the same text share a key: each value is one of the five best
    check(all(any(abs(a - b) < 1e-4 * max(1, abs(b)) for b in best5) for a in top) and
          abs(top[0] - best5[0]) < 1e-4 * max(1, abs(best5[0])),
          "position %d: the top values %r are not the direct computation's %r" % (i, top, best5))
# the same request streamed: the same entries, in order
events = srv.stream(C, dict(GREEDY, logprobs=5))
s_lp = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
for ev in events:
    for c in ev["choices"]:
        if c.get("logprobs"):
            for k in s_lp:
                s_lp[k] += c["logprobs"][k]
check(s_lp == lp, "streamed completions logprobs differ from the whole reply's:\n%r\n%r" % (s_lp, lp))
check("logprobs" not in srv.json(C, dict(GREEDY, logprobs=0))["choices"][0] or
      srv.json(C, dict(GREEDY, logprobs=0))["choices"][0]["logprobs"] is None, "logprobs 0 gives none")

# chat shape
CHAT = {"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": N_LP, "temperature": 0,
        "ignore_eos": True, "logprobs": True, "top_logprobs": 3}
rc = srv.json(CH, CHAT)
content = rc["choices"][0]["logprobs"]["content"]
check(len(content) == rc["usage"]["completion_tokens"] == N_LP, "chat logprobs: %d entries" % len(content))
check(rc["choices"][0]["logprobs"]["refusal"] is None, "chat logprobs: refusal is not null")
for i, e in enumerate(content):
    check(set(e) == {"token", "logprob", "bytes", "top_logprobs"}, "chat entry keys %r" % sorted(e))
    check(isinstance(e["bytes"], list) and all(0 <= b < 256 for b in e["bytes"]), "chat bytes")
    try:
        check(bytes(e["bytes"]).decode("utf-8") == e["token"], "chat token %r vs bytes %r" % (e["token"], e["bytes"]))
    except UnicodeDecodeError:  # a piece that ends inside a character: U+FFFD in the token
        check("\ufffd" in e["token"], "chat token %r of ill-formed bytes has no U+FFFD" % e["token"])
    tl = e["top_logprobs"]
    check(len(tl) == 3, "chat: %d top entries, asked 3" % len(tl))
    check_entry_order("chat position %d" % i, [t["logprob"] for t in tl])
    check(tl[0]["token"] == e["token"] and tl[0]["logprob"] == e["logprob"], "chat position %d: the greedy token "
          "is not the most likely: %r vs %r" % (i, e, tl[0]))
events = srv.stream(CH, CHAT)
s_content = [x for ev in events for c in ev["choices"] if c.get("logprobs") for x in c["logprobs"]["content"]]
check(s_content == content, "streamed chat logprobs differ from the whole reply's")
# top_logprobs 0: the chosen tokens only
rc = srv.json(CH, dict(CHAT, top_logprobs=0))
check(all(e["top_logprobs"] == [] for e in rc["choices"][0]["logprobs"]["content"]), "top_logprobs 0")
# sampled: the chosen token's probability is at most the best one's
rc = srv.json(CH, dict(CHAT, temperature=1.5, seed=7, top_logprobs=20))
for e in rc["choices"][0]["logprobs"]["content"]:
    check(len(e["top_logprobs"]) == 20, "20 top entries")
    check(e["logprob"] <= e["top_logprobs"][0]["logprob"], "sampled token above the top")
    check(sum(math.exp(t["logprob"]) for t in e["top_logprobs"]) <= 1 + 1e-5, "the top 20 sum above 1")
# limits
expect_error(srv, CH, dict(CHAT, top_logprobs=21), 400, "top_logprobs: must be an integer in [0, 20]", "top_logprobs")
expect_error(srv, CH, dict(CHAT, logprobs=False), 400, "needs \"logprobs\": true", "top_logprobs")
expect_error(srv, C, dict(GREEDY, logprobs=21), 400, "logprobs: must be an integer in [0, 20]", "logprobs")
expect_error(srv, C, dict(GREEDY, top_logprobs=2), 400, "not a completions field", "top_logprobs")
expect_error(srv, "/tokenize", None, 405, "", method="GET")
expect_error(srv, "/metrics", None, 405, "", method="POST")
check(srv.stop() == 0, "guild serve did not exit with 0")

# ---- the multi-process pipeline: the CPU workers' wait and a restart are counted --------------------------
srv = Server("multi", "--cpu-workers", "1")
srv.json(C, {"prompt": PROMPT, "max_tokens": 4, "temperature": 0})
m0, _ = metrics(srv)
check(val(m0, "guild_cpu_expert_wait_seconds_total") > 0, "no CPU expert wait counted in the pipeline")
check(0 < val(m0, "guild_cpu_expert_wait_ratio") <= 1, "wait ratio %r" % val(m0, "guild_cpu_expert_wait_ratio"))
check(val(m0, "guild_worker_restarts_total", role="cpu") == 0, "restarts before any death")


def worker_pids():
    return [int(p) for p in re.findall(r"cpu-worker\[0\]: started, pid (\d+)", srv.text())]


check(len(worker_pids()) == 1, "the log does not name the CPU worker's pid:\n" + srv.text()[-2000:])
os.kill(worker_pids()[0], signal.SIGKILL)
deadline = time.time() + 30
while time.time() < deadline and len(worker_pids()) < 2:
    time.sleep(0.05)
check(len(worker_pids()) == 2, "the CPU worker was not restarted")
srv.json(C, {"prompt": PROMPT, "max_tokens": 4, "temperature": 0})
m1, _ = metrics(srv)
check(val(m1, "guild_worker_restarts_total", role="cpu") == 1, "restarts{cpu} %r after one kill" %
      val(m1, "guild_worker_restarts_total", role="cpu"))
check(val(m1, "guild_worker_restarts_total", role="gpu") == 0, "restarts{gpu} after a CPU worker's death")
check(srv.stop() == 0, "guild serve did not exit with 0")

# ---- the API key covers the new endpoints --------------------------------------------------------------
srv = Server("key", "--single-process", "--api-key", "sekret")
expect_error(srv, "/tokenize", {"content": "x"}, 401, "API key")
expect_error(srv, "/detokenize", {"tokens": [1]}, 401, "API key")
expect_error(srv, "/metrics", None, 401, "API key", method="GET")
metrics(srv, headers={"Authorization": "Bearer sekret"})
check(srv.json("/tokenize", {"content": "x"}, headers={"Authorization": "Bearer sekret"})["tokens"] != [],
      "/tokenize with the key")
check(srv.stop() == 0, "guild serve did not exit with 0")

print("serve_endpoints: %d checks passed" % serve_lib.checks)
