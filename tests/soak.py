#!/usr/bin/env python3
"""A soak of guild serve under faults (tests/soak.sh runs a short one in make check; the long one is run by hand,
its numbers in bench/results/): N requests through a multi-process `guild serve` while a killer sends SIGKILL to
its workers (CPU workers, the GPU worker, the stager when there is one) at random moments, and a report of what
came of the requests compared with the same server's text without faults.

The reference: the same server, same flags, unfaulted, answers each distinct request (prompt, seed) once. The soak:
a fresh server answers N requests cycling through them (whole and streamed, alternately), each compared with its
reference text. A request is
  completed  200 (a stream: chunks then data: [DONE], no error event) and the reference's text,
  wrong      200 and another text,
  lost       anything else: an error status or event, a cut stream, a timeout.
Kills: every KILL_EVERY seconds on average (uniform in [0.5, 1.5] x), a worker drawn among those that are ready
and died fewer than --per-minute times in the last 61 s, by our kills or as the server's log says (it kills a
worker silent for too long itself: on a starved machine that happens too) (the supervisor tolerates 3 deaths of
a worker a minute; past that it backs off, and requests fail by design: tests/serve_faults.sh checks that). A pid is
checked to be the server's child running the worker's program before the kill. The run ends when N requests
are answered and at least --kills workers were killed (bounded by --max-seconds); the server is stopped once
it has logged the death of every pid killed (a kill whose death it never logs is a problem). Restarts are the
server's "restarting it" lines; a coordinator crash is the server process ending before we stop it.

usage: soak.py --guild BIN/guild --model M.gguf --workdir DIR [--requests N] [--kills K] [--kill-every S]
               [--per-minute P] [--max-seconds S] [--json FILE] [-- extra guild serve flags]
Exit status 0 when lost, wrong, crashes and unseen kills are all 0 and the kills reached --kills; 1 otherwise.
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("--guild", required=True)
ap.add_argument("--model", required=True)
ap.add_argument("--workdir", required=True)
ap.add_argument("--requests", type=int, default=40)
ap.add_argument("--kills", type=int, default=6)
ap.add_argument("--kill-every", type=float, default=0.4)
ap.add_argument("--per-minute", type=int, default=3)
ap.add_argument("--max-seconds", type=float, default=120)
ap.add_argument("--max-tokens", type=int, default=24)
ap.add_argument("--prompts", type=int, default=12)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--json")
ap.add_argument("serve_args", nargs="*")
a = ap.parse_args()
rng = random.Random(a.seed)

WORDS = ("the a river stone light old new small green quiet north market song road cloud winter morning letter "
         "garden window bridge harbour lantern").split()


def prompts(n):
    r = random.Random(1234)
    return [" ".join(r.choice(WORDS) for _ in range(r.randint(4, 14))) for _ in range(n)]


class Server:
    def __init__(self, name):
        self.log_path = os.path.join(a.workdir, name + ".log")
        self.log = open(self.log_path, "w")
        self.p = subprocess.Popen([a.guild, "serve", "-m", a.model, "--port", "0", *a.serve_args],
                                  stdout=subprocess.DEVNULL, stderr=self.log)
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline and self.port is None:
            if self.p.poll() is not None:
                sys.exit("soak: guild serve exited with %d:\n%s" % (self.p.returncode, self.text()[-3000:]))
            m = re.search(r"listening on http://[^ ]*:(\d+)/", self.text())
            if m:
                self.port = int(m.group(1))
            time.sleep(0.05)
        if self.port is None:
            sys.exit("soak: guild serve did not start")

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def ask(self, prompt, seed, stream, timeout=120):
        """(text, None) on success, (None, why) otherwise."""
        body = {"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0.8, "seed": seed, "stream": stream}
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            c.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            c.close()
        except (OSError, http.client.HTTPException) as e:
            return None, "connection: %r" % e
        if r.status != 200:
            return None, "status %d: %s" % (r.status, data[:300].decode(errors="replace"))
        if not stream:
            return json.loads(data)["choices"][0]["text"], None
        text, done = [], False
        for line in data.decode(errors="replace").split("\n"):
            if not line.startswith("data: "):
                continue
            if line[6:] == "[DONE]":
                done = True
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                return None, "stream error: %s" % ev["error"]["message"]
            text.append(ev["choices"][0]["text"])
        return ("".join(text), None) if done else (None, "stream without [DONE]")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return -1


WORKER_BIN = {"cpu-worker": "guild-cpu-worker", "gpu-worker": "guild-gpu-worker", "stager": "guild-stager"}


def workers(srv):
    """{name: pid} of the workers ready now, from the server's log ("NAME: started, pid N", "NAME: ready (pid N")."""
    state = {}
    for m in re.finditer(r": ((?:cpu|gpu)-worker(?:\[\d+\])?|stager): (started, pid|ready \(pid) (\d+)", srv.text()):
        name, pid = m.group(1), int(m.group(3))
        if m.group(2).startswith("started"):
            state[name] = (pid, False)
        elif state.get(name, (0, False))[0] == pid:
            state[name] = (pid, True)
    return {n: pid for n, (pid, ready) in state.items() if ready}


def is_our_worker(pid, parent, name):
    try:
        with open("/proc/%d/stat" % pid) as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmd = f.read().split(b"\0")[0].decode(errors="replace")
    except (OSError, ValueError, IndexError):
        return False
    return ppid == parent and os.path.basename(cmd) == WORKER_BIN[re.sub(r"\[\d+\]$", "", name)]


os.makedirs(a.workdir, exist_ok=True)
P = prompts(a.prompts)
jobs = [(P[i % len(P)], 100 + i % len(P)) for i in range(len(P))]

# the reference: an unfaulted server of the same flags
ref_srv = Server("reference")
ref = {}
for p, seed in jobs:
    text, why = ref_srv.ask(p, seed, False)
    if text is None:
        sys.exit("soak: the unfaulted reference failed: %s" % why)
    ref[(p, seed)] = text
ref_srv.stop()

srv = Server("soak")
t0 = time.time()
stats = {"requests": 0, "completed": 0, "lost": 0, "wrong": 0, "kills": 0, "kills_by_worker": {},
         "coordinator_crashes": 0}
problems = []
killed = []  # (name, pid) of each kill
stop = threading.Event()
lock = threading.Lock()


DEATH = re.compile(r": ((?:cpu|gpu)-worker(?:\[\d+\])?|stager) (?:\(pid (\d+)\)[^\n]*; restarting it|died \d+ times "
                   r"within a minute \(last: pid (\d+) )")


def killer():
    died = {}  # pid: (name, when): our kills, and the deaths the server logged (its own kills of hung workers too)
    while not stop.is_set():
        if stop.wait(a.kill_every * rng.uniform(0.5, 1.5)):
            return
        now = time.time()
        for m in DEATH.finditer(srv.text()):
            died.setdefault(int(m.group(2) or m.group(3)), (m.group(1), now))
        ready = workers(srv)
        ok = [n for n in sorted(ready)
              if len([1 for w, t in died.values() if w == n and now - t < 61]) < a.per_minute]
        if not ok:
            continue
        name = rng.choice(ok)
        pid = ready[name]
        if not is_our_worker(pid, srv.p.pid, name):
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        died[pid] = (name, now)
        with lock:
            killed.append((name, pid))
            stats["kills"] += 1
            stats["kills_by_worker"][name] = stats["kills_by_worker"].get(name, 0) + 1


kt = threading.Thread(target=killer, daemon=True)
kt.start()
i = 0
while True:
    with lock:
        enough = stats["requests"] >= a.requests and stats["kills"] >= a.kills
    if enough or time.time() - t0 > a.max_seconds:
        break
    if srv.p.poll() is not None:
        stats["coordinator_crashes"] += 1
        problems.append("the server exited with %d" % srv.p.returncode)
        break
    p, seed = jobs[i % len(jobs)]
    text, why = srv.ask(p, seed, stream=i % 2 == 1)
    stats["requests"] += 1
    if text is None:
        stats["lost"] += 1
        problems.append("request %d (%s): %s" % (i, "stream" if i % 2 else "whole", why))
    elif text != ref[(p, seed)]:
        stats["wrong"] += 1
        problems.append("request %d: text differs from the reference: %r vs %r" % (i, text[:80], ref[(p, seed)][:80]))
    else:
        stats["completed"] += 1
    i += 1
stop.set()
kt.join()


def deaths():
    """The pids whose death the server logged (restarted, or the last one before a back-off)."""
    t = srv.text()
    return {int(p) for p in re.findall(r"\(pid (\d+)\) killed by signal", t) + re.findall(r"\(last: pid (\d+) ", t)}


# a kill just before the end is seen on the supervisor's next tick: wait for it before stopping the server (a
# stop first would end the server without its restart, and the counts would not match)
deadline = time.time() + 10
while srv.p.poll() is None and time.time() < deadline and any(p not in deaths() for _, p in killed):
    time.sleep(0.05)
seen = deaths()
unseen = [(n, p) for n, p in killed if p not in seen]
for n, p in unseen:
    problems.append("%s (pid %d) was killed but the server logged no death of it" % (n, p))
if srv.p.poll() is not None and not stats["coordinator_crashes"]:
    stats["coordinator_crashes"] += 1
    problems.append("the server exited with %d" % srv.p.returncode)
rc_stop = srv.stop()
log = srv.text()  # complete once it has exited
stats["restarts"] = len(re.findall(r"\(pid \d+\) [^\n]*; restarting it", log))
stats["backoffs"] = len(re.findall(r"; until it is ready, requests fail", log))
stats["kills_unseen"] = len(unseen)
stats["seconds"] = round(time.time() - t0, 1)
stats["server_exit"] = rc_stop
stats["distinct_requests"] = len(jobs)
stats["serve_args"] = a.serve_args
print("soak: %d requests in %.1f s: %d completed, %d lost, %d wrong; %d kills (%s), %d restarts, %d back-offs, "
      "%d coordinator crashes; server exit %d" % (
          stats["requests"], stats["seconds"], stats["completed"], stats["lost"], stats["wrong"], stats["kills"],
          ", ".join("%s %d" % kv for kv in sorted(stats["kills_by_worker"].items())), stats["restarts"],
          stats["backoffs"], stats["coordinator_crashes"], rc_stop))
for pr in problems[:20]:
    print("  " + pr)
if a.json:
    with open(a.json, "w") as f:
        json.dump(dict(stats, problems=problems[:100]), f, indent=1)
good = (not stats["lost"] and not stats["wrong"] and not stats["coordinator_crashes"] and stats["kills"] >= a.kills
        and not unseen and stats["requests"] >= a.requests and rc_stop == 0)
sys.exit(0 if good else 1)
