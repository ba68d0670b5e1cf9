#!/usr/bin/env python3
"""guild serve --parallel on the device (bench/device/sessions.sh): 8 completions, greedy, sent at once to a
`--parallel 4` server and one at a time to a `--parallel 1` server on the same model; every reply's text and
token counts must be equal, and the concurrent requests must have overlapped in time. The device has no npm (the
openai client test, tests/serve_parallel.sh, runs on the development machine); this is its stdlib twin.
With --long the prompts are 100-250 tokens (run the servers with --batch 48: their chunks take the CUDA backend's
flash-attention kernel, whose bits follow the chunk) and each reply's log probabilities are compared too: equal
only when a prompt is prefilled in the same chunks beside the others as alone.
Usage: sessions_serve.py PARALLEL_URL ALONE_URL [--long]"""
import json
import sys
import threading
import time
import urllib.request

PROMPTS = [
    "one two three four",
    "The quick brown fox jumps over",
    "In the beginning",
    "a b c d e f g h i j",
    "Once upon a time there was",
    "1 2 3",
    "def main():",
    "The capital of France is",
]


LONG = False


def prompt(i):
    if not LONG:
        return PROMPTS[i]
    return " ".join([PROMPTS[i]] * (12 + 3 * i))


def complete(base, i, out):
    req = {"prompt": prompt(i), "max_tokens": 24 + 3 * i, "temperature": 0}
    if LONG:
        req["logprobs"] = 2
    body = json.dumps(req).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=120) as r:
        j = json.loads(r.read())
    lp = j["choices"][0].get("logprobs") or {}
    out[i] = (j["choices"][0]["text"], j["usage"]["prompt_tokens"], j["usage"]["completion_tokens"], t0,
              time.monotonic(), json.dumps(lp.get("token_logprobs")), json.dumps(lp.get("top_logprobs")))


def main():
    global LONG
    par, alone = sys.argv[1], sys.argv[2]
    LONG = "--long" in sys.argv[3:]
    got = [None] * len(PROMPTS)
    threads = [threading.Thread(target=complete, args=(par, i, got)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = [None] * len(PROMPTS)
    for i in range(len(PROMPTS)):
        complete(alone, i, want)
    bad = 0
    for i in range(len(PROMPTS)):
        if got[i] is None or want[i] is None:
            print(f"request {i}: no reply")
            bad += 1
        elif got[i][:3] != want[i][:3]:
            print(f"request {i}: parallel {got[i][:3]!r} differs from alone {want[i][:3]!r}")
            bad += 1
        elif got[i][5:] != want[i][5:]:
            print(f"request {i} ({got[i][1]} prompt tokens): the same text, log probabilities differ from alone")
            bad += 1
    ok = [g for g in got if g]
    overlap = sum(1 for a in ok for b in ok if a is not b and a[3] < b[4] and b[3] < a[4]) // 2
    what = "replies (text and log probabilities)" if LONG else "replies"
    print(f"{len(PROMPTS) - bad} of {len(PROMPTS)} {what} of --parallel 4 equal alone; {overlap} overlapping pairs")
    if overlap == 0:
        print("the concurrent requests did not overlap")
        bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
