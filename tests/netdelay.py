#!/usr/bin/env python3
"""tests/netdelay.py: a TCP relay that adds a fixed one-way delay to every byte, in both directions.

A stand-in for `tc qdisc ... netem delay` on kernels built without sch_netem (the two-host experiments,
tests/netns_remote.sh and bench/netns_latency.sh, prefer netem and say which they used). It listens on
LISTEN_HOST:PORT for each --map PORT:HOST:PORT2 and relays each connection to HOST:PORT2; what it reads at time t
it writes at t + delay, in order, so the link behaves like one with that much more latency each way (and no
bandwidth limit). Threads sleeping on the monotonic clock (a sub-millisecond delay stays one; an event loop's
timers round to milliseconds); TCP_NODELAY on both sides, as ZeroMQ sets.

usage: netdelay.py --delay-ms D [--listen-host H] --map PORT:HOST:PORT2 [--map ...]
Prints "ready" on stdout once it listens; runs until killed.
"""
import argparse
import queue
import socket
import sys
import threading
import time


def nodelay(sock):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def pump(src, dst, delay):
    """Copies src to dst, each chunk `delay` seconds after it was read (a reader and a writer thread)."""
    chunks = queue.Queue()

    def write():
        while True:
            due, data = chunks.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(data)
            except OSError:
                break
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            chunks.put((time.monotonic() + delay, data))
    except OSError:
        pass
    chunks.put((0.0, None))
    writer.join()


def serve(listener, host, port, delay):
    while True:
        conn, _ = listener.accept()
        try:
            up = socket.create_connection((host, port))
        except OSError:
            conn.close()
            continue
        nodelay(conn)
        nodelay(up)

        def run(a=conn, b=up):
            t = threading.Thread(target=pump, args=(b, a, delay), daemon=True)
            t.start()
            pump(a, b, delay)
            t.join()
            a.close()
            b.close()

        threading.Thread(target=run, daemon=True).start()


def main():
    ap = argparse.ArgumentParser(description="TCP relay with a fixed one-way delay")
    ap.add_argument("--delay-ms", type=float, required=True)
    ap.add_argument("--listen-host", default="127.0.0.1")
    ap.add_argument("--map", action="append", required=True, help="PORT:HOST:PORT2")
    a = ap.parse_args()
    delay = a.delay_ms / 1000.0
    threads = []
    for m in a.map:
        lport, host, port = m.split(":")
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((a.listen_host, int(lport)))
        ls.listen(16)
        threads.append(threading.Thread(target=serve, args=(ls, host, int(port), delay), daemon=True))
    for t in threads:
        t.start()
    print("ready", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
