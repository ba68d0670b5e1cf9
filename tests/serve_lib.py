"""What the guild serve tests share (tests/serve_*.py): failing with a message, counting checks, starting a
`guild serve` on a free port and waiting for it, requests (whole, JSON, streamed as Server-Sent Events, or
dropped half way), /metrics samples, writing a model with guild-mkmodel, and stopping the server.

A test script sets `serve_lib.GUILD` (the guild binary) and `serve_lib.T` (its work directory, where each
server's stderr goes to NAME.log) before starting servers. Standard library only.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

GUILD = None
T = None
checks = 0


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    global checks
    checks += 1
    if not cond:
        fail(msg)


def mkmodel(builddir, path, *args):
    """Writes a test model with guild-mkmodel (args: its flags)."""
    r = subprocess.run([os.path.join(builddir, "tools", "guild-mkmodel"), *args, "-q", "-o", path],
                       capture_output=True, timeout=120)
    if r.returncode != 0:
        fail("guild-mkmodel %s: %s" % (" ".join(args), r.stderr.decode(errors="replace")))
    return path


class Server:
    """A `guild serve` process on a free port (--threads 1 unless args say otherwise); its stderr goes to
    T/NAME.log."""

    def __init__(self, name, model, *args, start_timeout=60):
        self.name = name
        self.log_path = os.path.join(T, name + ".log")
        self.log = open(self.log_path, "w")
        cmd = [GUILD, "serve", "-m", model, "--port", "0"]
        if "--threads" not in args:
            cmd += ["--threads", "1"]
        if "--backend" not in args:  # the CPU's numbers, on a machine with a GPU too
            cmd += ["--backend", "cpu"]
        self.p = subprocess.Popen(cmd + list(args), stdout=subprocess.DEVNULL, stderr=self.log)
        self.port = None
        deadline = time.time() + start_timeout
        while time.time() < deadline and self.port is None:
            if self.p.poll() is not None:
                fail("guild serve %s exited with %d:\n%s" % (" ".join(args), self.p.returncode, self.text()))
            m = re.search(r"listening on http://[^ ]*:(\d+)/", self.text())
            if m:
                self.port = int(m.group(1))
            time.sleep(0.05)
        if self.port is None:
            fail("guild serve did not start:\n" + self.text())

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers dict (lower-case names), body bytes); a dict or list body is sent as JSON."""
        c = self.conn(timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, hdrs, data

    def json(self, path, body, status=200, headers=None):
        """POSTs body; checks the status; the reply parsed (strict UTF-8)."""
        st, _, data = self.request("POST", path, body, headers)
        text = data.decode("utf-8")
        check(st == status, "%s %s: status %d, expected %d: %s" % (path, json.dumps(body)[:200], st, status, text))
        return json.loads(text)

    def stream(self, path, body):
        """The events of a streamed reply: (list of parsed JSON events, saw [DONE])."""
        c = self.conn()
        c.request("POST", path, body=json.dumps(dict(body, stream=True)).encode())
        r = c.getresponse()
        check(r.status == 200, "%s stream: status %d" % (path, r.status))
        check(r.getheader("Content-Type", "").startswith("text/event-stream"), "stream content type")
        events, done = [], False
        raw = r.read().decode("utf-8")
        c.close()
        for block in raw.split("\n\n"):
            if not block:
                continue
            check(block.startswith("data: "), "SSE event without 'data: ': %r" % block[:100])
            payload = block[len("data: "):]
            if payload == "[DONE]":
                done = True
                continue
            check(not done, "an event after [DONE]")
            events.append(json.loads(payload))
        return events, done

    def stream_start(self, path, body, events=1):
        """Starts a streamed request; returns its socket once `events` data events have arrived (the caller
        closes it: the client going away)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        data = json.dumps(dict(body, stream=True)).encode()
        s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % (path.encode(), len(data)) + data)
        got = b""
        while got.count(b"data: ") < events:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        return s

    def stream_and_drop(self, path, body, events=1):
        """Starts a streamed request and closes the connection after `events` data events have arrived."""
        self.stream_start(path, body, events).close()

    def metrics(self):
        """GET /metrics as {(name, frozenset of label pairs): value}."""
        st, _, data = self.request("GET", "/metrics")
        check(st == 200, "/metrics: status %d" % st)
        out = {}
        for line in data.decode().splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
            check(m is not None, "/metrics line %r" % line)
            labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
        return out

    def health(self):
        st, _, data = self.request("GET", "/health")
        return st, json.loads(data)

    def stop(self, timeout=30):
        """SIGTERM; the exit status (the process is killed and the test fails after timeout seconds)."""
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            fail("guild serve did not exit within %d s of SIGTERM:\n%s" % (timeout, self.text()))
        self.log.close()
        return rc


def metric(samples, name, **labels):
    """One sample's value (0 when absent)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
