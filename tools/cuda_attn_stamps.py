#!/usr/bin/env python3
"""tools/cuda_attn_stamps.py — where decode attention's time goes, from a GP_CU_TRACE build's stamps.

A GP_CU_TRACE build (tools/cuda_timeline.py says how to make one) also writes $GP_CU_TRACE_FILE.attn: for each decode
attention launch, block (0, 0)'s SM clock at eleven points of split_decode (cuda_attn.cu, attn_stamp; the last
two in the cluster kernel's fold) and its split count.  Prints the mean cycles between the points by split count
(the first third of the launches left out):
    python3 tools/cuda_attn_stamps.py t.txt.attn"""
import collections
import sys

NAMES = ["descriptor and norms", "staging", "wait for q.k.v", "jobs (q, k rope)", "barrier", "scores",
         "softmax and p.v", "finish (a cluster: partials and sync)", "fold (block 0)", "cluster sync"]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = [[int(v) for v in line.split()] for line in open(sys.argv[1]) if line.strip()]
    rows = rows[len(rows) // 3:]
    n = len(rows[0]) - 1 if rows else 0  # time points (the last column: the splits)
    for r in rows:  # a point a path skips (the float32 path has no scores stamp) counts as the one before it
        for k in range(1, n):
            if r[k] == 0 and r[0]:
                r[k] = r[k - 1]
    by = collections.defaultdict(list)
    for r in rows:
        if all(r[k] for k in range(n)):
            by[r[n]].append(r)
    for ns, rs in sorted(by.items()):
        d = [sum(r[k + 1] - r[k] for r in rs) / len(rs) for k in range(n - 1)]
        print("splits %d (%d launches): " % (ns, len(rs)) + ", ".join("%s %.0f" % x for x in zip(NAMES, d)) +
              "; after the wait %.0f, total %.0f cycles" % (sum(d[3:]), sum(d)))


if __name__ == "__main__":
    main()
