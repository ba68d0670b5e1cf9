#!/usr/bin/env python3
"""guild serve end to end (tests/serve_api.sh runs it): starts the server on a free port with a tiny model
written by guild-mkmodel and talks to it with the standard library only.

Checks: replies equal `guild run`'s text for the same prompt and sampling parameters (greedy and sampled,
completions and chat), streamed chunks concatenate to the whole reply, usage counts, stop strings, prefix
reuse of the KV cache, every error status with a message naming the problem, the queue bound (503), a client
that goes away stops its generation, malformed requests leave the server up, and SIGTERM ends it cleanly.

usage: serve_api.py BUILDDIR WORKDIR
"""
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

B, T = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_lib  # noqa: E402
from serve_lib import check, fail  # noqa: E402

GUILD = serve_lib.GUILD = os.path.join(B, "guild")
serve_lib.T = T
MODEL = os.path.join(T, "m.gguf")


class Server(serve_lib.Server):
    """A `guild serve` of model (default MODEL; tests/serve_lib.py)."""

    def __init__(self, name, *args, model=MODEL):
        super().__init__(name, model, *args)


def guild_run(prompt, n, *args):
    """guild run's text (decoded as a client would: U+FFFD for ill-formed bytes), ids and prompt length."""
    ids_path = os.path.join(T, "run.ids")
    r = subprocess.run([GUILD, "run", "-m", MODEL, "-p", prompt, "-n", str(n), "--threads", "1",
                        "--ids-out", ids_path, *args], capture_output=True, timeout=120)
    if r.returncode != 0:
        fail("guild run %s: %s" % (" ".join(args), r.stderr.decode(errors="replace")))
    ids = open(ids_path).read().split()
    n_prompt = int(re.search(rb"prefill: (\d+) tokens", r.stderr).group(1))
    eog = re.search(rb"stopped: end of text", r.stderr) is not None
    return r.stdout.decode("utf-8", errors="replace"), ids, n_prompt, eog


def text_of(reply):
    c = reply["choices"][0]
    return c["message"]["content"] if "message" in c else c["text"]


def streamed_text(events, chat):
    out = []
    for e in events:
        for c in e["choices"]:
            out.append(c["delta"].get("content", "") if chat else c["text"])
    return "".join(out)


def expect_error(srv, method, path, body, status, fragment, param=None, headers=None):
    st, hdrs, data = srv.request(method, path, body, headers)
    check(st == status, "%s %s %r: status %d, expected %d: %s" % (method, path, body if not isinstance(
        body, bytes) else body[:60], st, status, data[:300]))
    try:
        err = json.loads(data.decode("utf-8"))["error"]
    except Exception:
        fail("%s %s: the %d reply is not an error object: %r" % (method, path, st, data[:300]))
    check(fragment in err["message"], "%s %s: message %r lacks %r" % (method, path, err["message"], fragment))
    check(isinstance(err["type"], str) and err["type"], "error without a type")
    if param is not None:
        check(err["param"] == param, "%s %s: param %r, expected %r" % (method, path, err["param"], param))
    return hdrs


# ---- the model ------------------------------------------------------------------------------------------
mk = subprocess.run([os.path.join(B, "tools", "guild-mkmodel"), "--arch", "qwen3moe", "--layers", "2", "--embd",
                     "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "64", "--experts", "8",
                     "--experts-used", "2", "--expert-ff", "128", "--ctx", "512", "--vocab", "796", "--type",
                     "Q8_0", "--seed", "5", "-q", "-o", MODEL], capture_output=True)
if mk.returncode != 0:
    fail("guild-mkmodel: " + mk.stderr.decode(errors="replace"))
NOCHAT = os.path.join(T, "nochat.gguf")
if subprocess.run([os.path.join(B, "tests", "gguf_edit"), MODEL, NOCHAT, "--drop-key",
                   "tokenizer.chat_template"]).returncode != 0:
    fail("gguf_edit --drop-key tokenizer.chat_template")

PROMPT = "Once upon a time, in a land far away"
CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"}]
CHAT_TEXT = ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
             "<|im_start|>assistant\n")
SAMPLED = {"temperature": 0.9, "top_k": 30, "top_p": 0.9, "min_p": 0.02, "seed": 42, "repetition_penalty": 1.1}
SAMPLED_ARGS = ["--temp", "0.9", "--top-k", "30", "--top-p", "0.9", "--min-p", "0.02", "--seed", "42",
                "--repeat-penalty", "1.1"]

# ---- the default (multi-process) server: replies equal guild run's ------------------------------------
srv = Server("main")
st, _, data = srv.request("GET", "/health")
check(st == 200 and json.loads(data)["status"] == "ok", "GET /health: %d %r" % (st, data))
models = json.loads(srv.request("GET", "/v1/models")[2])
check(models["object"] == "list" and models["data"][0]["id"] == "m.gguf", "GET /v1/models: %r" % models)


def compare(name, path, body, run_prompt, n, run_args, chat=False):
    want, ids, n_prompt, eog = guild_run(run_prompt, n, *run_args)
    got = srv.json(path, dict(body, max_tokens=n))
    check(text_of(got) == want, "%s: text differs from guild run's:\n got %r\nwant %r" % (name, text_of(got), want))
    fin = got["choices"][0]["finish_reason"]
    check(fin == ("stop" if eog else "length"), "%s: finish_reason %s (guild run: %s)" % (name, fin, eog))
    u = got["usage"]
    check(u["prompt_tokens"] == n_prompt, "%s: prompt_tokens %d, guild run %d" % (name, u["prompt_tokens"], n_prompt))
    n_gen = len(ids) - (1 if eog else 0)
    check(u["completion_tokens"] == n_gen, "%s: completion_tokens %d, expected %d" % (name, u["completion_tokens"],
                                                                                      n_gen))
    check(u["total_tokens"] == n_prompt + n_gen, "%s: total_tokens" % name)
    check(got["object"] == ("chat.completion" if chat else "text_completion"), "%s: object %s" % (name, got["object"]))
    check(got["model"] == "m.gguf" and got["id"] and isinstance(got["created"], int), "%s: envelope" % name)
    # streamed: the same text in pieces, the same end, the same usage
    events, done = srv.stream(path, dict(body, max_tokens=n, stream_options={"include_usage": True}))
    check(done, "%s: stream without [DONE]" % name)
    check(streamed_text(events, chat) == want, "%s: streamed text differs:\n got %r\nwant %r" % (
        name, streamed_text(events, chat), want))
    check(len(events) >= 3, "%s: only %d events" % (name, len(events)))
    fins = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
    check(fins == [fin], "%s: streamed finish_reasons %r" % (name, fins))
    check(events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == n_gen and
          events[-1]["usage"]["prompt_tokens"] == n_prompt, "%s: usage chunk %r" % (name, events[-1]))
    check(all(e["id"] == events[0]["id"] for e in events), "%s: chunk ids differ" % name)
    if chat:
        check(events[0]["choices"][0]["delta"].get("role") == "assistant", "%s: no role in the first chunk" % name)
        check(all(e["object"] == "chat.completion.chunk" for e in events), "%s: chunk object" % name)
    return want


greedy = compare("completions, greedy", "/v1/completions", {"prompt": PROMPT, "temperature": 0}, PROMPT, 48,
                 ["--temp", "0"])
check("\ufffd" in greedy, "the test model's text has no ill-formed bytes to repair (pick another seed)")
compare("completions, sampled", "/v1/completions", dict(SAMPLED, prompt=PROMPT), PROMPT, 64, SAMPLED_ARGS)
# to the end of the context, sampling from the whole vocabulary: byte tokens give NUL and ill-formed sequences
WILD = {"temperature": 1.5, "top_k": 0, "top_p": 1, "min_p": 0, "seed": 1}
wild = compare("completions, to the context's end", "/v1/completions", dict(WILD, prompt=PROMPT, ignore_eos=True),
               PROMPT, 600, ["--temp", "1.5", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--seed", "1",
                             "--ignore-eos"])
check("\0" in wild and "\ufffd" in wild, "the wild text has no NUL or no U+FFFD (pick another seed)")
compare("chat, greedy", "/v1/chat/completions", {"messages": CHAT, "temperature": 0}, CHAT_TEXT, 40,
        ["--temp", "0", "--parse-special"], chat=True)
compare("chat, sampled", "/v1/chat/completions", dict(SAMPLED, messages=CHAT), CHAT_TEXT, 40,
        SAMPLED_ARGS + ["--parse-special"], chat=True)
# a text part array is the same message
parts = [{"role": "system", "content": [{"type": "text", "text": "You are "}, {"type": "text", "text": "terse."}]},
         CHAT[1]]
r = srv.json("/v1/chat/completions", {"messages": parts, "temperature": 0, "max_tokens": 40})
check(text_of(r) == guild_run(CHAT_TEXT, 40, "--temp", "0", "--parse-special")[0], "chat with content parts")
# the prompt as [text], and as token ids (guild run -v prints them), gives the same reply as the text
r1 = srv.json("/v1/completions", {"prompt": [PROMPT], "temperature": 0, "max_tokens": 48})
check(text_of(r1) == greedy, "prompt as [text]")
v = subprocess.run([GUILD, "run", "-m", MODEL, "-p", PROMPT, "-n", "1", "-v", "--single-process"],
                   capture_output=True, timeout=120)
ids = [int(x) for x in re.search(rb"prompt ids:([ 0-9]*)", v.stderr).group(1).split()]
r1 = srv.json("/v1/completions", {"prompt": ids, "temperature": 0, "max_tokens": 48})
check(text_of(r1) == greedy and r1["usage"]["prompt_tokens"] == len(ids), "prompt as token ids")

# prefix reuse: the same prompt again reuses all but its last position, with the same reply
r2 = srv.json("/v1/completions", {"prompt": PROMPT, "temperature": 0, "max_tokens": 48})
check(text_of(r2) == greedy, "a repeated request gives another reply")
cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
check(cached == r2["usage"]["prompt_tokens"] - 1, "prefix reuse: %d cached of %d" % (cached,
                                                                                     r2["usage"]["prompt_tokens"]))

# stop strings: the text up to the first one, finish_reason stop, whole or streamed
m = re.search(r"[a-z]{3,}", greedy[8:])
check(m is not None, "no word in the greedy text to stop at: %r" % greedy)
stop = m.group(0)
want = greedy[:greedy.index(stop)]
for stops in (stop, [stop], ["\u00e9\u00e9never", stop]):
    r = srv.json("/v1/completions", {"prompt": PROMPT, "temperature": 0, "max_tokens": 48, "stop": stops})
    check(text_of(r) == want and r["choices"][0]["finish_reason"] == "stop",
          "stop %r: %r (%s), expected %r" % (stops, text_of(r), r["choices"][0]["finish_reason"], want))
    check(r["usage"]["completion_tokens"] < 48, "stop: generation went on to max_tokens")
events, done = srv.stream("/v1/completions", {"prompt": PROMPT, "temperature": 0, "max_tokens": 48, "stop": stop})
check(done and streamed_text(events, False) == want, "streamed stop: %r" % streamed_text(events, False))
# max_tokens 0 and a prompt that exactly fills the context
r = srv.json("/v1/completions", {"prompt": PROMPT, "max_tokens": 0})
check(text_of(r) == "" and r["usage"]["completion_tokens"] == 0 and r["choices"][0]["finish_reason"] == "length",
      "max_tokens 0: %r" % r)

# ---- errors ---------------------------------------------------------------------------------------------
C, CC = "/v1/completions", "/v1/chat/completions"
expect_error(srv, "POST", C, b'{"prompt": "x", ', 400, "not valid JSON")
expect_error(srv, "POST", C, b'', 400, "not valid JSON")
expect_error(srv, "POST", C, b'[1, 2]', 400, "must be a JSON object")
expect_error(srv, "POST", C, b'{"prompt": "caf\xc3\xa9 \xff\xfe"}', 400, "not valid JSON")  # invalid UTF-8
expect_error(srv, "POST", C, b'\x00\x01\x02garbage', 400, "not valid JSON")
expect_error(srv, "POST", C, {"max_tokens": 4}, 400, "prompt: is required", "prompt")
expect_error(srv, "POST", C, {"prompt": 5}, 400, "prompt: must be", "prompt")
expect_error(srv, "POST", C, {"prompt": ["a", "b"]}, 400, "only one prompt", "prompt")
expect_error(srv, "POST", C, {"prompt": [1, 99999]}, 400, "prompt[1]: must be a token id", "prompt[1]")
expect_error(srv, "POST", C, {"prompt": "x", "temperature": -1}, 400, "temperature: must be a number >= 0",
             "temperature")
expect_error(srv, "POST", C, {"prompt": "x", "temperature": "hot"}, 400, "temperature: must be a number",
             "temperature")
expect_error(srv, "POST", C, {"prompt": "x", "top_p": 0}, 400, "top_p: must be a number in (0, 1]", "top_p")
expect_error(srv, "POST", C, {"prompt": "x", "top_k": 1.5}, 400, "top_k: must be an integer", "top_k")
expect_error(srv, "POST", C, {"prompt": "x", "min_p": 2}, 400, "min_p", "min_p")
expect_error(srv, "POST", C, {"prompt": "x", "seed": -3}, 400, "seed", "seed")
expect_error(srv, "POST", C, {"prompt": "x", "max_tokens": -1}, 400, "max_tokens", "max_tokens")
expect_error(srv, "POST", C, {"prompt": "x", "max_tokens": "ten"}, 400, "max_tokens: must be an integer",
             "max_tokens")
expect_error(srv, "POST", C, {"prompt": "x", "stop": 7}, 400, "stop: must be a string", "stop")
expect_error(srv, "POST", C, {"prompt": "x", "stop": ["a", ""]}, 400, "stop[1]: must be a non-empty string",
             "stop[1]")
expect_error(srv, "POST", C, {"prompt": "x", "stream": "yes"}, 400, "stream: must be true or false", "stream")
expect_error(srv, "POST", C, {"prompt": "x", "n": 2}, 400, "n: only 1 is supported", "n")
expect_error(srv, "POST", C, {"prompt": "x", "presence_penalty": 0.5}, 400, "presence_penalty: only 0",
             "presence_penalty")
expect_error(srv, "POST", C, {"prompt": "x", "frequency_penalty": 3}, 400, "frequency_penalty", "frequency_penalty")
expect_error(srv, "POST", C, {"prompt": "x", "logprobs": 21}, 400, "logprobs: must be an integer in [0, 20]",
             "logprobs")  # logprobs themselves: tests/serve_endpoints.py
expect_error(srv, "POST", C, {"prompt": "x", "model": 3}, 400, "model: must be a string", "model")
expect_error(srv, "POST", C, {"prompt": "x " * 600}, 400, "more than the context of 512 tokens", "prompt")
expect_error(srv, "POST", CC, {"prompt": "x"}, 400, "messages: is required", "messages")
expect_error(srv, "POST", CC, {"messages": []}, 400, "messages: must be a non-empty array", "messages")
expect_error(srv, "POST", CC, {"messages": [{"role": "user"}]}, 400, "messages[0].content: is required",
             "messages[0].content")
expect_error(srv, "POST", CC, {"messages": [CHAT[1], {"role": "tool", "content": "x"}]}, 400,
             "messages[1].role: \"tool\" is not supported", "messages[1].role")
expect_error(srv, "POST", CC, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
             "not supported (only \"text\")", "messages[0].content[0]")
expect_error(srv, "POST", CC, {"messages": [{"role": "user", "content": "x " * 600}]}, 400,
             "more than the context", "messages")
expect_error(srv, "POST", CC, {"messages": CHAT, "tools": [{"type": "function"}]}, 400, "tools are not supported",
             "tools")
expect_error(srv, "GET", "/v1/nothing", None, 404, "no endpoint GET /v1/nothing")
expect_error(srv, "POST", "/", b"{}", 404, "no endpoint POST /")
hdrs = expect_error(srv, "GET", C, None, 405, "method GET is not allowed on /v1/completions")
check(hdrs.get("allow") == "POST", "405 without Allow: POST: %r" % hdrs)
expect_error(srv, "DELETE", "/v1/models", None, 405, "not allowed")
# the server is still there and still right
check(text_of(srv.json(C, {"prompt": PROMPT, "temperature": 0, "max_tokens": 48})) == greedy, "after the errors")
check(srv.stop() == 0, "exit status after SIGTERM")

# ---- limits, keys, the queue, disconnects, garbage: a single-process server --------------------------------
srv = Server("limits", "--single-process", "--ctx", "16384", "--max-body", "65536", "--queue", "1", "--api-key",
             "sekret")
KEY = {"Authorization": "Bearer sekret"}
check(srv.request("GET", "/health")[0] == 200, "/health needs no key")
expect_error(srv, "GET", "/v1/models", None, 401, "API key")
expect_error(srv, "POST", C, {"prompt": "x"}, 401, "API key", headers={"Authorization": "Bearer sekreT"})
expect_error(srv, "POST", C, {"prompt": "x"}, 401, "API key", headers={"Authorization": "sekret"})
r = srv.json(C, {"prompt": PROMPT, "temperature": 0, "max_tokens": 48}, headers=KEY)
check(text_of(r) == greedy, "single process: the greedy text differs from guild run's")
# bodies over the limit: announced by Content-Length, or chunked
expect_error(srv, "POST", C, b'{"prompt": "' + b"a" * 100000 + b'"}', 413, "larger than the server's limit",
             headers=KEY)
c = srv.conn()
c.putrequest("POST", C)
c.putheader("Authorization", "Bearer sekret")
c.putheader("Transfer-Encoding", "chunked")
c.endheaders()
for _ in range(20):
    c.send(b"1000\r\n" + b"a" * 4096 + b"\r\n")
c.send(b"0\r\n\r\n")
r = c.getresponse()
body = r.read()
check(r.status == 413 and b"larger than" in body, "chunked body over the limit: %d %r" % (r.status, body[:200]))
c.close()


def raw(data, read=True):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(data)
    out = b""
    if read:
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
        except socket.timeout:
            pass
    s.close()
    return out


# a hopeless Content-Length is answered at once
reply = raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\nContent-Length: "
            b"10000000000\r\n\r\n{\"prompt\": \"")
check(reply.startswith(b"HTTP/1.1 413") and b"larger than the server's limit" in reply,
      "Content-Length 1e10: %r" % reply[:300])
# garbage, a truncated body, a bad request line: answered or dropped, never fatal
raw(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(200))  # a TLS hello
raw(b"GARBAGE\r\n\r\n")
raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"prompt\"", read=False)
raw(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
raw(b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
check(srv.request("GET", "/health")[0] == 200, "the server did not survive malformed requests")

# the queue: one request runs, one waits, the next is refused with 503
LONG = {"prompt": PROMPT, "max_tokens": 16000, "ignore_eos": True, "temperature": 0, "stream": True}
a = srv.conn()
a.request("POST", C, body=json.dumps(LONG).encode(), headers=KEY)
ra = a.getresponse()
check(ra.status == 200, "long request: %d" % ra.status)
ra.readline()  # its first event: it is running
b_result = {}


def waiting_request():
    b_result["reply"] = srv.json(C, {"prompt": PROMPT, "temperature": 0, "max_tokens": 48}, headers=KEY)


tb = threading.Thread(target=waiting_request)
tb.start()
deadline = time.time() + 20
while time.time() < deadline and json.loads(srv.request("GET", "/health")[2])["waiting"] != 1:
    time.sleep(0.01)
check(json.loads(srv.request("GET", "/health")[2]) == {"status": "ok", "running": 1, "waiting": 1},
      "the second request is not waiting")
expect_error(srv, "POST", C, {"prompt": "x", "max_tokens": 1}, 503, "busy", headers=KEY)
# the streaming client goes away: its generation stops, the waiting request runs
a.close()
tb.join(60)
check(not tb.is_alive() and text_of(b_result["reply"]) == greedy, "the waiting request after the disconnect")
m = re.search(r"request (\d+): \d+ prompt tokens \(\d+ cached\), (\d+) generated, cancelled", srv.text())
check(m is not None, "no cancelled request in the log:\n" + srv.text())
check(int(m.group(2)) < 16000, "the disconnected stream generated all its tokens")
# a non-streaming client that goes away
s = socket.create_connection(("127.0.0.1", srv.port))
body = json.dumps(dict(LONG, stream=False)).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\nContent-Type: "
          b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
time.sleep(0.3)
s.close()
deadline = time.time() + 20
while time.time() < deadline and len(re.findall(r"generated, cancelled", srv.text())) < 2:
    time.sleep(0.05)
counts = [int(x) for x in re.findall(r"(\d+) generated, cancelled", srv.text())]
check(len(counts) == 2 and counts[1] < 16000, "the non-streaming disconnect did not stop generation: %r" % counts)

# SIGTERM while a stream runs: the stream ends, the process exits 0
a = srv.conn()
a.request("POST", C, body=json.dumps(LONG).encode(), headers=KEY)
ra = a.getresponse()
ra.readline()
t0 = time.time()
check(srv.stop() == 0, "exit status after SIGTERM during a stream")
check(time.time() - t0 < 10, "shutdown took %.1f s" % (time.time() - t0))
try:
    rest = ra.read()
except (http.client.IncompleteRead, ConnectionError) as e:
    rest = getattr(e, "partial", b"")
a.close()
check(b"[DONE]" not in rest, "a stream cut by shutdown ended as if complete")

# ---- speculative decoding ---------------------------------------------------------------------------------
# the model as its own draft model: greedy replies are --spec none's text, also on a reused prefix; a sampled reply
# is guild run --spec draft's with the same seed (the same draws); the per-request counters are logged
srv = Server("spec", "--single-process", "--spec", "draft", "--draft-model", MODEL, "--spec-max", "3")
r = srv.json(C, {"prompt": PROMPT, "temperature": 0, "max_tokens": 48})
check(text_of(r) == greedy, "--spec draft, greedy: %r vs %r" % (text_of(r), greedy))
r = srv.json(C, {"prompt": PROMPT, "temperature": 0, "max_tokens": 48})
check(text_of(r) == greedy, "--spec draft, greedy, the prompt cached: %r" % text_of(r))
events, done = srv.stream(C, {"prompt": PROMPT, "temperature": 0, "max_tokens": 48})
check(done and streamed_text(events, False) == greedy, "--spec draft streamed: %r" % streamed_text(events, False))
r = srv.json(C, dict(SAMPLED, prompt=PROMPT, max_tokens=40))
want = guild_run(PROMPT, 40, "--spec", "draft", "--draft-model", MODEL, "--spec-max", "3", *SAMPLED_ARGS)[0]
check(text_of(r) == want, "--spec draft, sampled: %r vs guild run's %r" % (text_of(r), want))
check(re.search(r"speculative: [1-9]\d* drafted, [1-9]\d* accepted", srv.text()) is not None,
      "no speculative counters in the log:\n" + srv.text()[-2000:])
check(srv.stop() == 0, "exit status (--spec)")

# ---- chat templates ---------------------------------------------------------------------------------------
srv = Server("nochat", "--single-process", model=NOCHAT)
check("no chat template" in srv.text(), "no warning at start-up for a model without a chat template")
expect_error(srv, "POST", CC, {"messages": CHAT}, 500, "--chat-template")
check(text_of(srv.json(C, {"prompt": PROMPT, "temperature": 0, "max_tokens": 48})) == greedy,
      "completions without a chat template")
check(srv.stop() == 0, "exit status (no chat template)")
srv = Server("named", "--single-process", "--chat-template", "chatml", model=NOCHAT)
r = srv.json(CC, {"messages": CHAT, "temperature": 0, "max_tokens": 40})
check(text_of(r) == guild_run(CHAT_TEXT, 40, "--temp", "0", "--parse-special")[0], "--chat-template chatml")
check(srv.stop() == 0, "exit status (--chat-template)")
# gpt-oss's harmony: the template's system header (date, reasoning effort) and developer instructions; a reply is
# split into its channels (content / reasoning_content). This model writes no channel markers (its vocabulary has
# none), so all of its reply is content, whole and streamed, and no reasoning_content appears.
srv = Server("harmony", "--single-process", "--chat-template", "gpt-oss", model=NOCHAT)
OSS_TEXT = ("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: "
            "2024-06\nCurrent date: %s\n\nReasoning: high\n\n# Valid channels: analysis, commentary, final. Channel "
            "must be included for every message.<|end|><|start|>developer<|message|># Instructions\n\nYou are terse."
            "\n\n<|end|><|start|>user<|message|>Hi there<|end|><|start|>assistant" % time.strftime("%Y-%m-%d"))
body = {"messages": CHAT, "temperature": 0, "max_tokens": 40, "reasoning_effort": "high"}
r = srv.json(CC, body)
want = guild_run(OSS_TEXT, 40, "--temp", "0", "--parse-special")[0]
check(text_of(r) == want, "--chat-template gpt-oss: %r vs %r" % (text_of(r), want))
check("reasoning_content" not in r["choices"][0]["message"], "no reasoning without an analysis channel")
events, done = srv.stream(CC, body)
check(done and streamed_text(events, True) == want, "gpt-oss streamed: %r" % streamed_text(events, True))
check(all("reasoning_content" not in c["delta"] for e in events for c in e["choices"]), "streamed reasoning")
expect_error(srv, "POST", CC, dict(body, reasoning_effort="max"), 400, "reasoning_effort", "reasoning_effort")
check(srv.stop() == 0, "exit status (gpt-oss)")
bad = os.path.join(T, "bad.jinja")
with open(bad, "w") as f:
    f.write("{% for m in messages %}{{ m.content }}{% endfor %}")
for arg, frag in ((bad, "is not one Guild recognises"), ("nosuch", "not a built-in template")):
    r = subprocess.run([GUILD, "serve", "-m", MODEL, "--port", "0", "--chat-template", arg], capture_output=True,
                       timeout=60)
    check(r.returncode == 2 and frag.encode() in r.stderr, "--chat-template %s: %d %r" % (arg, r.returncode,
                                                                                         r.stderr[-300:]))
r = subprocess.run([GUILD, "serve", "--help"], capture_output=True, timeout=60)
check(r.returncode == 0 and b"one at a" in r.stdout and b"/v1/chat/completions" in r.stdout, "guild serve --help")
r = subprocess.run([GUILD, "serve", "--port", "70000"], capture_output=True, timeout=60)
check(r.returncode == 2 and b"--port 70000" in r.stderr, "--port 70000: %r" % r.stderr)

print("PASS: guild serve: %d checks" % serve_lib.checks)
