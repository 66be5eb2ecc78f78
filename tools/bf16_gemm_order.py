"""bf16_gemm_order.py — which float32 summation order torch's bf16 linear uses on this machine's CPU.

torch.nn.functional.linear(x, W) on bf16 CPU tensors accumulates in float32 and rounds the output to bf16.  This
script computes the same products in numpy under candidate orders (each emulated in float32, one rounding per add)
and counts, per candidate, the outputs whose bf16 rounding differs from torch's; the order torch uses gives 0.
Candidates: pairs in increasing k summed in one accumulator (even element first / odd first: vdpbf16ps / AMX style),
16 lanes over k with lane j taking k = j mod 16 (genparity's AVX2 order), 16 lanes over pairs of k mod 32 (genparity's
vdpbf16ps order), and float64 (the exact sum, one rounding).
Run where torch is (the GPU machine's host made references/modes/cpu_bf16_eager): python3 tools/bf16_gemm_order.py
"""
import platform
import sys

import numpy as np
import torch


def bf16_round(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(torch.bfloat16).float().numpy()


def seq_pairs(x, w, odd_first):
    acc = np.zeros((x.shape[0], w.shape[0]), np.float32)
    for p in range(0, x.shape[1], 2):
        order = (p + 1, p) if odd_first else (p, p + 1)
        for k in order:
            if k < x.shape[1]:
                acc = (acc + np.outer(x[:, k], w[:, k]).astype(np.float32)).astype(np.float32)
    return acc


def lanes(x, w, width, pair):
    """lanes accumulators; lane j takes element blocks of `pair` elements: k // pair = j (mod width)."""
    n, k = x.shape
    acc = np.zeros((width, n, w.shape[0]), np.float32)
    for b in range(0, k, width * pair):
        for j in range(width):
            for e in ((1, 0) if pair == 2 else (0,)):  # vdpbf16ps: odd element of the pair first
                kk = b + j * pair + e
                if kk < k:
                    acc[j] = (acc[j] + np.outer(x[:, kk], w[:, kk]).astype(np.float32)).astype(np.float32)
    s = 16
    while s > 1:  # the fixed tree: j += j + s/2
        s //= 2
        for j in range(s):
            acc[j] = (acc[j] + acc[j + s]).astype(np.float32)
    return acc[0]


def main():
    print("machine:", platform.processor() or platform.machine(), "torch", torch.__version__,
          "mkldnn bf16:", getattr(torch.backends.mkldnn, "is_available", lambda: None)())
    try:
        flags = [l for l in open("/proc/cpuinfo") if l.startswith(("model name", "flags"))][:2]
        print(flags[0].strip())
        print("bf16 flags:", sorted({f for f in flags[1].split() if "bf16" in f or "amx" in f}))
    except OSError:
        pass
    rng = np.random.default_rng(0)
    for m, k, n in ((1, 256, 512), (7, 256, 512), (64, 1024, 256)):
        x = bf16_round(rng.standard_normal((m, k)))
        w = bf16_round(rng.standard_normal((n, k)) * 0.05)
        t = torch.nn.functional.linear(torch.from_numpy(x).bfloat16(), torch.from_numpy(w).bfloat16()).float().numpy()
        cands = {
            "pairs even-first": seq_pairs(x, w, False),
            "pairs odd-first": seq_pairs(x, w, True),
            "16 lanes k%16 (fma)": lanes(x, w, 16, 1),
            "16 lanes pairs (dpbf16)": lanes(x, w, 16, 2),
            "float64": (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.float32),
        }
        for name, c in cands.items():
            diff = int((bf16_round(c) != t).sum())
            print(f"m={m:3d} k={k:5d} n={n:4d}  {name:26s} {diff:6d} of {t.size} outputs differ from torch")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
