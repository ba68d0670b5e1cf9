#!/usr/bin/env python3
"""guild serve's prefix cache end to end (tests/serve_prefix.sh runs it), on tiny guild-mkmodel models, with the
standard library only (tests/serve_lib.py).

Checks: a request that shares a prefix with an earlier one, whose sequence other requests have taken since, is
answered from a snapshot (usage.prompt_tokens_details.cached_tokens > 0) with the same text and log probabilities
as a server that reuses nothing; the same with --parallel 2 (and every reply of concurrent requests equal to the
request alone), in the multi-process pipeline and in one process; a tiny --cache-ram evicts (counted in /metrics)
and still answers right; --cache-dir snapshots survive a restart and are reused; a corrupted, a truncated and a
foreign (another model's) snapshot file are refused with a message naming the file and never used, the request
still answered right; a qwen35moe hybrid (recurrent state) reuses a repeated prompt's all-but-last token with the
same bits; a client that disconnects mid-stream frees its sequence for the next request.

usage: serve_prefix.py BUILDDIR WORKDIR
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_lib  # noqa: E402
from serve_lib import Server, check, metric, mkmodel  # noqa: E402

B, T = sys.argv[1], sys.argv[2]
serve_lib.GUILD = os.path.join(B, "guild")
serve_lib.T = T

SHAPE = ["--layers", "2", "--embd", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "64", "--experts", "8",
         "--experts-used", "2", "--expert-ff", "128", "--ctx", "512", "--vocab", "796", "--type", "Q8_0"]
MODEL = mkmodel(B, os.path.join(T, "m.gguf"), "--arch", "qwen3moe", "--seed", "5", *SHAPE)
OTHER = mkmodel(B, os.path.join(T, "o.gguf"), "--arch", "qwen3moe", "--seed", "6", *SHAPE)
HYBRID = mkmodel(B, os.path.join(T, "h.gguf"), "--arch", "qwen35moe", "--layers", "4", "--full-attn-interval", "2",
                 "--embd", "64", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--experts", "4",
                 "--experts-used", "2", "--expert-ff", "32", "--ctx", "512", "--vocab", "796", "--type", "Q8_0",
                 "--seed", "11")

A = "The quick brown fox jumps over the lazy dog while the farmer counts his sheep in the morning light"
A2 = A + " and then the rain began to fall on the"
B_ = "Completely different words about ships, harbours and the sea"
C = "Numbers: one two three four five six seven eight nine ten"
D = "A fourth prompt that shares nothing with the others at all"


def ask(srv, prompt, n=8):
    """(text, logprobs, cached tokens, prompt tokens) of a greedy completion with log probabilities."""
    r = srv.json("/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 3,
                                     "seed": 1})
    u = r["usage"]
    return (r["choices"][0]["text"], r["choices"][0]["logprobs"], u["prompt_tokens_details"]["cached_tokens"],
            u["prompt_tokens"])


def cold(model, prompts, *args):
    """Each prompt's reply from a server that reuses nothing."""
    srv = Server("cold-" + os.path.basename(model), model, "--no-prefix-cache", *args)
    out = {p: ask(srv, p) for p in prompts}
    srv.stop()
    for p, r in out.items():
        check(r[2] == 0, "--no-prefix-cache: %d cached tokens" % r[2])
    return out


def same(got, ref, what):
    check(got[0] == ref[0], "%s: text %r, alone %r" % (what, got[0], ref[0]))
    check(got[1] == ref[1], "%s: log probabilities differ from the request alone" % what)


def evicted_reuse(name, model, ref, *args):
    """A, then B and C (which take its sequence), then A2: A2 reuses A's snapshot."""
    srv = Server(name, model, *args)
    for p in (A, B_, C):
        same(ask(srv, p), ref[p], "%s: %r" % (name, p[:20]))
    got = ask(srv, A2)
    same(got, ref[A2], name + ": A2 after A was evicted from its sequence")
    check(got[2] > 0, "%s: A2 reused nothing of A (cached_tokens %d)" % (name, got[2]))
    m = srv.metrics()
    check(metric(m, "guild_prefix_cache_hits_total", source="snapshot") >= 1, name + ": no snapshot hit counted")
    check(metric(m, "guild_prefix_cache_misses_total") >= 2, name + ": misses not counted")
    check(metric(m, "guild_prefix_cache_snapshots") >= 1, name + ": no snapshot held")
    check(metric(m, "guild_prefix_cache_bytes", where="ram") > 0, name + ": no snapshot bytes in RAM")
    check(srv.stop() == 0, name + ": exit status")
    return got[2]


ref = cold(MODEL, [A, A2, B_, C, D])

# --- evicted from its sequence, reused from a snapshot: multi-process pipeline, one process, --parallel 2 ---
n1 = evicted_reuse("pipeline", MODEL, ref)
evicted_reuse("single", MODEL, ref, "--single-process")
evicted_reuse("parallel", MODEL, ref, "--parallel", "2", "--single-process")

# --- --parallel 2: concurrent requests (log probabilities) equal the request alone; a repeated prompt reuses ---
srv = Server("parallel-conc", MODEL, "--parallel", "2", "--batch", "16")
results = {}


def worker(p, k):
    results[k] = ask(srv, p)


for rnd in range(2):
    ths = [threading.Thread(target=worker, args=(p, (rnd, i))) for i, p in enumerate([A, B_, C, D, A2])]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    for i, p in enumerate([A, B_, C, D, A2]):
        same(results[(rnd, i)], ref[p], "--parallel 2, round %d, %r" % (rnd, p[:20]))
check(any(results[(1, i)][2] > 0 for i in range(5)), "--parallel 2: nothing reused in the second round")
srv.stop()

# --- --parallel 2: a request shares the prompt a running session has prefilled: copied from its sequence ---
# (a context of 4096: the running request has thousands of tokens to go when the second one comes)
sref = cold(MODEL, [A2], "--ctx", "4096")
same(sref[A2], ref[A2], "--ctx 4096 against 512")
srv = Server("session", MODEL, "--parallel", "2", "--single-process", "--ctx", "4096")
sock = srv.stream_start("/v1/completions", {"prompt": A, "max_tokens": 4000, "temperature": 0, "ignore_eos": True})
got = ask(srv, A2)
same(got, ref[A2], "session: A2 beside a running A")
check(got[2] > 0, "session: A2 reused nothing of the running A (cached_tokens %d)" % got[2])
check(metric(srv.metrics(), "guild_prefix_cache_hits_total", source="session") == 1,
      "session: the copy from a running session was not counted")
sock.close()
srv.stop()

# --- a tiny RAM bound: snapshots are evicted (counted), replies stay right ---
srv = Server("tiny-ram", MODEL, "--cache-ram", "1K", "--single-process")
for p in (A, B_, C, A2):
    same(ask(srv, p), ref[p], "--cache-ram 1K: %r" % p[:20])
m = srv.metrics()
check(metric(m, "guild_prefix_cache_evictions_total") >= 1, "--cache-ram 1K: no eviction counted")
check(metric(m, "guild_prefix_cache_hits_total", source="snapshot") == 0, "--cache-ram 1K: a snapshot hit")
srv.stop()

# --- on disk: snapshots survive a restart; a directory that is not there is an error at start-up ---
r = subprocess.run([serve_lib.GUILD, "serve", "-m", MODEL, "--port", "0", "--single-process", "--cache-dir",
                    os.path.join(T, "missing")], capture_output=True, timeout=60)
check(r.returncode != 0 and b"--cache-dir" in r.stderr and b"missing: No such file" in r.stderr,
      "--cache-dir of a missing directory: status %d, %r" % (r.returncode, r.stderr[-300:]))
DIR = os.path.join(T, "snaps")
os.mkdir(DIR)
srv = Server("disk1", MODEL, "--cache-dir", DIR)
same(ask(srv, A), ref[A], "disk1: A")
check(srv.stop() == 0, "disk1: exit status")
files = glob.glob(os.path.join(DIR, "pfx-*.snap"))
check(len(files) >= 1, "--cache-dir: no snapshot file after a request and a restart: %r" % os.listdir(DIR))
srv = Server("disk2", MODEL, "--cache-dir", DIR)
got = ask(srv, A2)
same(got, ref[A2], "disk2: A2 after a restart")
check(got[2] > 0, "disk2: A2 reused nothing of the snapshot file (cached_tokens %d)" % got[2])
check(got[2] == n1, "disk2: %d cached tokens from the file, %d from RAM" % (got[2], n1))
check(metric(srv.metrics(), "guild_prefix_cache_hits_total", source="snapshot") == 1, "disk2: hit not counted")
srv.stop()

# --- refused files: a foreign model's, a truncated one, one whose blob is corrupt ---
ODIR = os.path.join(T, "other")
os.mkdir(ODIR)
srv = Server("other", OTHER, "--cache-dir", ODIR)
ask(srv, A)
srv.stop()
for f in glob.glob(os.path.join(ODIR, "pfx-*.snap")):
    shutil.copy(f, os.path.join(DIR, "pfx-0000000000000001-1.snap"))
for f in glob.glob(os.path.join(DIR, "pfx-*.snap")):
    if os.path.basename(f).startswith("pfx-0000000000000001"):
        continue
    data = bytearray(open(f, "rb").read())
    trunc = os.path.join(DIR, "pfx-0000000000000002-1.snap")
    open(trunc, "wb").write(data[:len(data) - 10])
    data[-5] ^= 0x40  # inside the blob: found when it is read
    open(f, "wb").write(data)
srv = Server("corrupt", MODEL, "--cache-dir", DIR)
got = ask(srv, A2)
same(got, ref[A2], "corrupt: A2")
log = srv.text()
check("pfx-0000000000000001-1.snap refused: made for another model file" in log,
      "a foreign snapshot was not refused by name:\n" + log)
check("pfx-0000000000000002-1.snap refused:" in log, "a truncated snapshot was not refused:\n" + log)
check("refused: corrupt: its contents do not match their checksum" in log,
      "a corrupt snapshot was not refused:\n" + log)
m = srv.metrics()
check(metric(m, "guild_prefix_cache_refused_total") >= 3, "refused files not counted")
check(metric(m, "guild_prefix_cache_hits_total", source="snapshot") == 0, "a refused snapshot was used")
srv.stop()

# --- a hybrid: the state snapshotted at the last prompt token; the same prompt after others reuses it ---
href = cold(HYBRID, [A, B_, C, A2])
for name, args in (("hybrid", ()), ("hybrid-single", ("--single-process",)),
                   ("hybrid-parallel", ("--parallel", "2", "--single-process"))):
    srv = Server(name, HYBRID, *args)
    for p in (A, B_, C):
        same(ask(srv, p), href[p], "%s: %r" % (name, p[:20]))
    got = ask(srv, A)
    same(got, href[A], name + ": A again")
    check(got[2] == got[3] - 1, "%s: A again reused %d of %d tokens" % (name, got[2], got[3]))
    same(ask(srv, A2), href[A2], name + ": A2")
    srv.stop()

# --- a client that disconnects mid-stream frees its sequence ---
for name, args in (("drop", ()), ("drop-parallel", ("--parallel", "2"))):
    srv = Server(name, MODEL, "--queue", "1", *args)
    for _ in range(3):
        srv.stream_and_drop("/v1/completions", {"prompt": A, "max_tokens": 400, "temperature": 0,
                                                "ignore_eos": True})
    deadline = time.time() + 30
    while time.time() < deadline:
        st, h = srv.health()
        if h.get("running") == 0 and h.get("waiting") == 0:
            break
        time.sleep(0.05)
    check(h.get("running") == 0, "%s: the dropped streams still run: %r" % (name, h))
    same(ask(srv, B_), ref[B_], name + ": the request after dropped streams")
    m = srv.metrics()
    check(metric(m, "guild_requests_total", endpoint="completions", outcome="cancelled") >= 1,
          name + ": no cancelled request counted")
    srv.stop()

print("PASS: %d checks" % serve_lib.checks)
