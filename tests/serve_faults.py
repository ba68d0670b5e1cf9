#!/usr/bin/env python3
"""guild serve under faults (tests/serve_faults.sh runs it), in the multi-process mode:

  - a NaN planted in one token's embedding row: a request whose prompt has that token gets a 500 error object
    naming the layer, the tensor and the position (a stream: its error event, then data: [DONE]); /health stays
    200 and the next requests are served, with the same text as before;
  - a CPU worker, then the GPU worker, killed more often than the supervisor tolerates (4 deaths within a
    minute): while it backs off, /health answers 503 "degraded" with the reason and requests get 503 at once;
    after the back-off the worker is started again, /health is 200 and requests are served with the same text;
  - the port is bound before the model loads: a second server on the same port fails at once;
  - a worker started by hand (--listen) that is lost: /health 503 "degraded" naming it and requests 503 until
    it registers again (then served, the same text); lost for good, the server exits 1 after --rejoin-ms naming
    it; with --fallback-local the requests go on with the same text.

usage: serve_faults.py BUILDDIR WORKDIR MODEL POISONED_MODEL
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

B, T, MODEL, POISONED = sys.argv[1:5]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_lib  # noqa: E402
from serve_lib import check  # noqa: E402

GUILD = serve_lib.GUILD = os.path.join(B, "guild")
serve_lib.T = T


class Server(serve_lib.Server):
    """A `guild serve` of the pipeline with one CPU worker (tests/serve_lib.py); replies as (status, body)."""

    def __init__(self, name, model, *args):
        super().__init__(name, model, "--cpu-workers", "1", *args)

    def call(self, method, path, body=None, timeout=60):
        st, _, data = self.request(method, path, body, {"Content-Type": "application/json"}, timeout)
        return st, data

    def complete(self, prompt, stream=False):
        return self.call("POST", "/v1/completions",
                         {"prompt": prompt, "max_tokens": 6, "temperature": 0, "stream": stream})

    def health(self):
        st, data = self.call("GET", "/health")
        return st, json.loads(data)

    def stop(self):
        """SIGTERM; the exit status, or -1 (killed) when it does not exit within 20 s."""
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return -1


def text_of(data):
    return json.loads(data)["choices"][0]["text"]


def error_of(data):
    e = json.loads(data)["error"]
    check(set(e) == {"message", "type", "param", "code"}, "not an OpenAI error object: %r" % e)
    return e


GOOD, BAD = [5, 6, 7, 8], [5, 100, 7, 8]

# ---- a planted NaN --------------------------------------------------------------------------------------------
srv = Server("nan", POISONED)
st, data = srv.complete(GOOD)
check(st == 200, "a finite prompt: status %d %r" % (st, data))
good_text = text_of(data)
st, data = srv.complete(BAD)
check(st == 500, "the poisoned token: status %d, expected 500: %r" % (st, data))
e = error_of(data)
check(e["type"] == "server_error", "error type %r" % e["type"])
check("non-finite value: layer 0: its input, the token embedding (token_embd.weight), is not finite at position 1"
      in e["message"] and "element 3" in e["message"], "the message does not name layer, tensor, position: %r" % e)
st, h = srv.health()
check(st == 200 and h["status"] == "ok", "/health after a failed request: %d %r" % (st, h))
# a stream: its error event, then [DONE]
st, data = srv.complete(BAD, stream=True)
check(st == 200, "stream: status %d" % st)
events = [l[6:] for l in data.decode().split("\n") if l.startswith("data: ")]
check(events and events[-1] == "[DONE]", "a failed stream does not end with data: [DONE]: %r" % events[-3:])
check(len(events) >= 2 and "error" in json.loads(events[-2]) and
      "token_embd.weight" in json.loads(events[-2])["error"]["message"], "no error event before [DONE]: %r" % events)
for _ in range(2):
    st, data = srv.complete(GOOD)
    check(st == 200 and text_of(data) == good_text, "served after the NaN: %d %r" % (st, data))
check(srv.stop() == 0, "exit status after SIGTERM")

# ---- the port before the model ----------------------------------------------------------------------------------
srv = Server("port", MODEL)
t0 = time.time()
r = subprocess.run([GUILD, "serve", "-m", MODEL, "--port", str(srv.port), "--cpu-workers", "1"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
err = r.stderr.decode(errors="replace")
check(r.returncode == 1 and "Address already in use" in err, "a port in use: %d %r" % (r.returncode, err))
check("started, pid" not in err and time.time() - t0 < 5, "the second server started workers first: %r" % err)

# ---- a worker past the give-up limit: back-off, 503, then served again -------------------------------------------
st, data = srv.complete(GOOD)
check(st == 200, "before the kills: %d" % st)
base_text = text_of(data)


def give_up(name, backoff):
    """Kills worker `name` (as the log names it) 4 times as soon as each is started; /health and requests must say
    503 while it backs off, then 200 and the same text once it is back after `backoff` (the log's "%.1f")."""
    def pids():
        return [int(p) for p in re.findall(re.escape(name) + r": started, pid (\d+)", srv.text())]

    first = len(pids())
    killed = 0
    deadline = time.time() + 60
    while killed < 4 and time.time() < deadline:
        ps = pids()
        if len(ps) == first + killed:
            try:
                os.kill(ps[-1], signal.SIGKILL)
            except ProcessLookupError:
                pass
            killed += 1
        time.sleep(0.05)
    check(killed == 4, "%s: could not kill it 4 times: %d" % (name, killed))
    mark = "%s died 4 times within a minute" % name
    deadline = time.time() + 10
    while time.time() < deadline and srv.text().count(mark) < 1:
        time.sleep(0.05)
    st, h = srv.health()
    check(st == 503 and h["status"] == "degraded" and mark in h["reason"],
          "/health while %s backs off: %d %r" % (name, st, h))
    st, data = srv.complete(GOOD)
    check(st == 503, "a request while %s backs off: %d %r" % (name, st, data))
    e = error_of(data)
    check(e["type"] == "unavailable_error" and "died 4 times" in e["message"], "its error: %r" % e)
    deadline = time.time() + 30
    while time.time() < deadline:
        st, h = srv.health()
        if st == 200:
            break
        time.sleep(0.1)
    check(st == 200 and h["status"] == "ok", "/health did not come back after %s's back-off: %d %r" % (name, st, h))
    check("%s: its back-off of %s s is over" % (name, backoff) in srv.text(),
          "no restart of %s after the back-off in the log" % name)
    st, data = srv.complete(GOOD)
    check(st == 200 and text_of(data) == base_text, "after %s's back-off: %d %r" % (name, st, data))


give_up("cpu-worker[0]", "2.0")
# the GPU worker (its KV cache and arena state are rebuilt by the new one); a first give-up for it: 2 s again
give_up("gpu-worker", "2.0")
check(srv.p.poll() is None, "the server exited")
check(srv.stop() == 0, "exit status after SIGTERM")

# ---- a worker started by hand (--listen) that is lost ------------------------------------------------------------
WORKER = os.path.join(B, "guild-cpu-worker")


def hand_worker(ep, name):
    return subprocess.Popen([WORKER, "--connect", ep], stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(T, name + ".log"), "w"))


def wait_health(srv, want, seconds):
    deadline = time.time() + seconds
    while True:
        st, h = srv.health()
        if st == want or time.time() > deadline:
            return st, h
        time.sleep(0.05)


ep = "ipc://" + os.path.join(T, "hand.sock")
w = hand_worker(ep, "hand-w1")  # (it waits for the endpoint; the server says where it listens once it is ready)
srv = Server("hand", MODEL, "--listen", ep, "--rejoin-ms", "3000")
st, h = wait_health(srv, 200, 30)
check(st == 200 and h["status"] == "ok", "/health once the worker registered: %d %r" % (st, h))
st, data = srv.complete(GOOD)
check(st == 200 and text_of(data) == base_text, "served by the worker started by hand: %d %r" % (st, data))
# lost (here: killed; its host gone would read the same): 503 with the reason while it may come back
w.kill()
w.wait()
st, h = wait_health(srv, 503, 10)
check(st == 503 and h["status"] == "degraded" and "cpu-worker[0] (pid %d" % w.pid in h["reason"] and
      "was lost" in h["reason"] and "waiting up to 3000 ms" in h["reason"], "/health with the worker lost: %d %r" % (st, h))
st, data = srv.complete(GOOD)
check(st == 503 and "was lost" in error_of(data)["message"], "a request with the worker lost: %d %r" % (st, data))
# it comes back within --rejoin-ms: served again, the same text
w = hand_worker(ep, "hand-w2")
st, h = wait_health(srv, 200, 30)
check(st == 200, "/health after the worker registered again: %d %r" % (st, h))
st, data = srv.complete(GOOD)
check(st == 200 and text_of(data) == base_text, "served after the worker came back: %d %r" % (st, data))
# lost for good: the server exits 1 after --rejoin-ms, naming it (for a service manager to start it again)
w.kill()
w.wait()
try:
    rc = srv.p.wait(timeout=30)
except subprocess.TimeoutExpired:
    rc = None
check(rc == 1, "guild serve with its worker lost for good: exit status %r, expected 1" % rc)
check(re.search(r"cpu-worker\[0\] \(pid %d[^)]*\) was lost .* and has not registered again within 3000 ms.*"
                r"exiting \(status 1\)" % w.pid, srv.text()), "no exit message naming the worker:\n" + srv.text())
# --fallback-local: its shard goes to a worker the server starts, and the requests go on with the same text
ep = "ipc://" + os.path.join(T, "fallback.sock")
w = hand_worker(ep, "fallback-w1")
srv = Server("fallback", MODEL, "--listen", ep, "--fallback-local")
st, h = wait_health(srv, 200, 30)
check(st == 200, "/health once the worker registered (--fallback-local): %d %r" % (st, h))
w.kill()
w.wait()
for _ in range(3):
    st, data = srv.complete(GOOD)
    check(st == 200 and text_of(data) == base_text, "--fallback-local after the loss: %d %r" % (st, data))
check("its shard goes to a worker on this host (--fallback-local)" in srv.text(), "no fallback in the log")
check(srv.stop() == 0, "exit status after SIGTERM (--fallback-local)")
print("PASS: %d checks: a planted NaN fails its request (500, stream error + [DONE]) and the server goes on; a "
      "CPU worker and the GPU worker past the give-up limit: /health 503 degraded, 503 at once, served again "
      "after the back-off; the port is bound before the model loads; a lost worker started by hand: 503 "
      "naming it, served when it is back, exit 1 after --rejoin-ms, or --fallback-local" % serve_lib.checks)
