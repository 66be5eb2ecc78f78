#!/usr/bin/env python3
"""load_test.py — a bounded loopback load test of `genparity serve` (a benchmark, run by hand; never part of make test).

Starts `build/genparity serve --parallel SLOTS --max-queue QUEUE` on 127.0.0.1 (a free port), computes each seed's
single-request result one at a time, then sends N concurrent streaming /v1/completions requests through the official
openai client (seeds cycling over --seeds) and checks that every response is identical (text and token ids) to the
single-request result of its seed, that none was lost or mixed, and that the server's queue high-water mark stayed
within --max-queue.  Prints requests/s and p50/p99 time-to-first-token (first SSE chunk with text) of the concurrent
phase, plus the load average before and after.

    .venv/bin/python tools/load_test.py --model models/shakespeare-llama --requests 64 --parallel 4
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai


def stream_once(base: str, seed: int, args) -> dict:
    c = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=600)
    t0 = time.perf_counter()
    ttft = None
    text, ids, finish = [], [], None
    for ch in c.completions.create(model="m", prompt=args.prompt, max_tokens=args.max_tokens, temperature=0.9,
                                   top_p=0.95, seed=seed, stream=True, extra_body={"ignore_eos": True}):
        if ch.choices and ch.choices[0].text and ttft is None:
            ttft = time.perf_counter() - t0
        if ch.choices:
            text.append(ch.choices[0].text)
            finish = ch.choices[0].finish_reason or finish
        ext = (ch.model_extra or {}).get("genparity")
        if ext:
            ids.append(ext["token"])
    return {"seed": seed, "text": "".join(text), "ids": ids, "finish": finish, "ttft": ttft,
            "total": time.perf_counter() - t0}


def pct(xs: list, q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/shakespeare-llama")
    ap.add_argument("--bin", default="build/genparity")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--max-queue", type=int, default=60)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt", default="ROMEO:")
    args = ap.parse_args()
    load_before = os.getloadavg()
    proc = subprocess.Popen([args.bin, "serve", "--model", args.model, "--port", "0", "--parallel",
                             str(args.parallel), "--max-queue", str(args.max_queue)], stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    m = re.search(r"listening on (http://\S+?:\d+)", line)
    if not m:
        print("server did not start:", line, proc.stderr.read(), file=sys.stderr)
        return 1
    base = m.group(1)
    try:
        single = {s: stream_once(base, s, args) for s in range(args.seeds)}
        seeds = [i % args.seeds for i in range(args.requests)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.requests) as ex:
            res = list(ex.map(lambda s: stream_once(base, s, args), seeds))
        wall = time.perf_counter() - t0
        with urllib.request.urlopen(base + "/health") as r:
            health = json.loads(r.read())
    finally:
        proc.terminate()
        proc.wait(60)
    load_after = os.getloadavg()
    bad = [r["seed"] for r in res if (r["text"], r["ids"]) != (single[r["seed"]]["text"], single[r["seed"]]["ids"])]
    lost = args.requests - len(res) + sum(1 for r in res if r["finish"] != "length")
    ttfts = [r["ttft"] for r in res]
    print(f"requests: {len(res)} concurrent streaming on {args.parallel} slots (max-queue {args.max_queue}), "
          f"{args.max_tokens} tokens each, {args.seeds} seeds")
    print(f"identical to the single-request result: {len(res) - len(bad)}/{len(res)}; lost or unfinished: {lost}; "
          f"queue high-water {health['queue_high_water']} (limit {args.max_queue}); rejected {health['rejected']}")
    print(f"wall {wall:.2f} s; requests/s {len(res) / wall:.2f}; generated tokens/s "
          f"{len(res) * args.max_tokens / wall:.1f}")
    print(f"TTFT p50 {statistics.median(ttfts) * 1000:.0f} ms, p99 {pct(ttfts, 0.99) * 1000:.0f} ms, "
          f"max {max(ttfts) * 1000:.0f} ms")
    print(f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    ok = not bad and not lost and health["queue_high_water"] <= args.max_queue
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
