#!/usr/bin/env python3
"""cuda_gemm_stamps.py — where a wgmma GEMM block's time goes, from a GP_CU_TRACE build's $GP_CU_TRACE_FILE.gemm
(src/kernels/cuda/cuda_mma.cu's wg_stamp: each block's SM clock at its start, its first stage full, its main loop's
end, its totals staged and its end; the global timer at its start and end; its block, SM, rows and columns).

For each GEMM shape (rows x columns, GLU or not): launches (runs of consecutive blocks of one shape, the first SKIP
left out), blocks a launch, the mean µs a block of each phase (the SM clock, converted by the clock the global timer
gives), the main loop's µs per 64-column stage, a launch's span, and the mean gap on an SM between one block's end and
the next block's start within a launch.

usage: cuda_gemm_stamps.py FILE.gemm [--skip N]
"""
import argparse
import statistics
from collections import defaultdict


def launches(recs):
    """runs of consecutive records (block start order) of one shape"""
    run, key = [], None
    for r in recs:
        k = (r[8], r[9])
        if run and k != key:
            yield key, run
            run = []
        key = k
        run.append(r)
    if run:
        yield key, run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--skip", type=int, default=8, help="launches of each shape left out first (warm-up)")
    a = ap.parse_args()
    recs = [list(map(int, ln.split())) for ln in open(a.file) if ln.strip()]
    recs = [r for r in recs if r[4] > r[0] and r[6] > r[5]]
    for r in recs:  # a block with no chunk has no first stage; a split one stages nothing
        r[1] = r[1] or r[0]
        r[3] = r[3] or r[2]
    ghz = statistics.median((r[4] - r[0]) / (r[6] - r[5]) for r in recs)
    print(f"{len(recs)} blocks, SM clock {ghz:.3f} GHz (median of cycles / global-timer ns)")
    by = defaultdict(list)
    for key, run in launches(recs):
        by[key].append(run)
    print("rows x cols [glu]: launches, blocks | µs a block: first stage, loop, staging, stores, all | "
          "loop µs a stage | span µs | SM gap µs")
    for (rows, colsg), runs in by.items():
        runs = runs[a.skip:] or runs
        cols, glu = colsg & 0xFFFFFFFF, colsg >> 32
        blocks = [r for run in runs for r in run]
        us = lambda i, j: statistics.mean((r[j] - r[i]) / ghz / 1e3 for r in blocks)
        groups = 1 + max((r[7] >> 32) & 0xFF for r in blocks)
        stages = (cols + 63) // 64 / groups
        span = statistics.mean((max(r[6] for r in run) - min(r[5] for r in run)) / 1e3 for run in runs)
        gaps = []
        for run in runs:
            per_sm = defaultdict(list)
            for r in run:
                per_sm[r[7] >> 40].append(r)
            for bl in per_sm.values():
                bl.sort(key=lambda r: r[5])
                gaps += [(y[5] - x[6]) / 1e3 for x, y in zip(bl, bl[1:])]
        gap = f"{statistics.mean(gaps):.2f}" if gaps else "-"
        print(f"{rows} x {cols}{' glu' if glu else ''}: {len(runs)}, {len(runs[0])} | {us(0, 1):.2f}, "
              f"{us(1, 2):.2f}, {us(2, 3):.2f}, {us(3, 4):.2f}, {us(0, 4):.2f} | {us(1, 2) / stages:.3f} | "
              f"{span:.1f} | {gap}")


if __name__ == "__main__":
    main()
