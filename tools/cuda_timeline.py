#!/usr/bin/env python3
"""tools/cuda_timeline.py — a decode step's timeline from a GP_CU_TRACE build, without Nsight Systems.

Build the diagnostic binary here:   make cuda CUDA_ARCH="-gencode arch=compute_90a,code=sm_90a -DGP_CU_TRACE"
Run it on the GPU machine:           GENPARITY_CUDA_GRAPH=0 GP_CU_TRACE_FILE=t.txt genparity bench --device cuda \\
                                         -m M -p 0 -n 200 -r 1 --compute f32
                                     (GENPARITY_CUDA_GRAPH=1: steps as graphs, each replay logging its launches)
Read it:                             python3 tools/cuda_timeline.py t.txt [--steps]

Each line of the trace is one launch: index, blocks, the first and the last time (ns, the GPU's global timer) a block
of it passed its wait for the previous kernel, and the kernel's name.  Kernels pass their waits in launch order, so
"span" = the next launch's first pass minus this one's is the time the kernel held the chain (its own work after
the wait plus the hand-over to the next).  Steps are cut at the one-token embeddings (1 block); the first third is
left out (warm-up).  Prints the mean span per kernel and block count over the steps, and with --steps the mean per
position in the step.  With graphs, the build also writes t.txt.host, the host's side of each recorded step (when it
began recording, launched the head's graph, ended the recording, launched the rest, saw the step done, and had uploaded
the head's per-step values); its means and medians are printed first."""
import collections
import re
import statistics
import sys


def short(name):
    s = re.sub(r"^_Z\d+", "", name)
    m = re.match(r"[A-Za-z_0-9]+?(?=I|E|v|P|$)", s)
    return m.group(0) if m else name[:24]


def host_summary(path):
    """The host's mean and median µs a step between its marks (steps that ran as graphs, the first third left out;
    with the sixth mark, the head's per-step values' upload, the head's part split in two)."""
    try:
        rows = [[float(v) for v in line.split()] for line in open(path)]
    except OSError:
        return
    rows = [r + [0.0] * (6 - len(r)) for r in rows if r[1] > 0 and r[3] > 0]
    rows = rows[len(rows) // 3:]
    up = bool(rows) and all(r[5] > 0 for r in rows)
    names = (["recording and the upload", "the head's launch"] if up else ["recording to the head's launch"]) + \
        ["the rest's recording", "its launch", "until the sync returned", "the caller, to the next step"]
    parts = []
    for a, b in zip(rows, rows[1:]):
        d = ([a[5] - a[0], a[1] - a[5]] if up else [a[1] - a[0]]) + [a[2] - a[1], a[3] - a[2], a[4] - a[3], b[0] - a[4]]
        if min(d) >= 0 and d[-1] < 1000:  # (longer: a pause between runs, not a step's turn)
            parts.append(d)
    if parts:
        cols = list(zip(*parts))
        print("host, %d steps, mean / median us: " % len(parts) +
              ", ".join("%s %.1f / %.1f" % (k, statistics.mean(c), statistics.median(c)) for k, c in zip(names, cols)))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    host_summary(sys.argv[1] + ".host")
    rows = []
    for line in open(sys.argv[1]):
        f = line.split()
        rows.append((int(f[1]), int(f[2]), int(f[3]), short(f[4])))
    cuts = [i for i, r in enumerate(rows) if r[3] == "embed_kernel" and r[0] == 1]
    # a step runs from one decode embedding to the launch before the next (whose first pass ends the last span)
    steps = [(cuts[k], cuts[k + 1] - 1) for k in range(len(cuts) - 1)]
    steps = steps[len(steps) // 3:]
    if not steps:
        sys.exit("fewer than two steps in the trace")
    per_pos = collections.defaultdict(list)
    totals = []
    for a, b in steps:
        totals.append(rows[b + 1][1] - rows[a][1])
        for i in range(a, b + 1):
            per_pos[(i - a, rows[i][3], rows[i][0])].append((rows[i + 1][1] - rows[i][1], rows[i][2] - rows[i][1]))
    print("%d steps, mean %.1f us from a step's first kernel to the next step's"
          % (len(steps), sum(totals) / len(totals) / 1e3))
    mean = lambda v, k: sum(x[k] for x in v) / len(v) / 1e3
    if "--steps" in sys.argv:
        print("%4s %-28s %7s %10s %12s" % ("pos", "kernel", "blocks", "span us", "pass spread"))
        for (pos, name, blocks), v in sorted(per_pos.items()):
            print("%4d %-28s %7d %10.2f %12.2f" % (pos, name, blocks, mean(v, 0), mean(v, 1)))
    agg = collections.defaultdict(list)
    for (pos, name, blocks), v in per_pos.items():
        agg[(name, blocks)].append((mean(v, 0), mean(v, 1)))
    print("%-28s %7s %6s %10s %10s %12s" % ("kernel", "blocks", "launch", "span us", "per step", "pass spread"))
    for (name, blocks), v in sorted(agg.items(), key=lambda kv: -sum(x[0] for x in kv[1])):
        s = sum(x[0] for x in v)
        spread = sum(x[1] for x in v) / len(v)
        print("%-28s %7d %6d %10.2f %10.2f %12.2f" % (name, blocks, len(v), s / len(v), s, spread))


if __name__ == "__main__":
    main()
