#!/usr/bin/env python3
"""tools/ncu_sass_runs.py — where a kernel's executed instructions lie in its code, from Nsight Compute's source page.

A kernel that runs once per launch on a few multiprocessors (decode attention) fetches its instructions cold every
launch; the fetch stalls grow with the number of places execution jumps to, not only with the instructions run.
Profile one launch on the GPU machine, then print its page:
    ncu -k regex:attn_ --launch-skip 400 --launch-count 1 --set full --import-source no -o rep \\
        genparity bench --device cuda -m M -p 0 -n 40 -r 1 --compute f32      (GENPARITY_CUDA_GRAPH=0)
    ncu -i rep.ncu-rep --page source --csv --print-source sass > k.csv
Read it:
    python3 tools/ncu_sass_runs.py k.csv [--all]
Prints the kernel's size, the instructions executed at least once, the runs of consecutive executed instructions
(after the first griddepcontrol wait that ran, ACQBULK in the SASS, or all with --all), and the warp stall samples
by reason."""
import csv
import signal
import sys


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # (piped into head)
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = list(csv.reader(open(sys.argv[1])))
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    ex = [int(d[ix["Instructions Executed"]] or 0) for d in data]
    src = [d[ix["Source"]].strip() for d in data]
    n = len(ex)
    waits = [i for i in range(n) if src[i].startswith("ACQBULK") and ex[i] > 0]
    start = 0 if "--all" in sys.argv or not waits else waits[0]
    used = [i for i in range(start, n) if ex[i] > 0]
    runs, r0 = [], None
    for i in range(start, n + 1):
        e = i < n and ex[i] > 0
        if e and r0 is None:
            r0 = i
        if not e and r0 is not None:
            runs.append((r0, i - r0))
            r0 = None
    print(f"{n} instructions in the kernel; from {start}: {len(used)} executed, in {len(runs)} runs "
          f"({len(set(i // 8 for i in used))} lines of 128 bytes)")
    for a, k in runs:
        print(f"  {a:6d} {k:5d}  x{max(ex[a:a + k]):<5d} {src[a][:60]}")
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    tot = sorted(((sum(int(d[ix[r]] or 0) for d in data), r) for r in reasons), reverse=True)
    print("stall samples:", ", ".join(f"{r[6:]} {v}" for v, r in tot if v))


if __name__ == "__main__":
    main()
