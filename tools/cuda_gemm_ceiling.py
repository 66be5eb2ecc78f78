#!/usr/bin/env python3
"""cuda_gemm_ceiling.py — what cuBLAS (through torch) and torch's SDPA reach on the projections and the attention of
a pp512 prefill, shape by shape: the ceiling against which the CUDA backend's bf16-mode prefill kernels are read
(issue 15's "60% of the tensor-core peak").  Runs on the GPU machine (torch installed); never part of the product.

Each case: bf16 operands, float32 accumulation (cuBLAS's default for bf16), CUDA-event timing of ITERS calls after
WARM warm-up calls, the median of ROUNDS rounds; TFLOP/s = 2 m n k / time (attention: 4 n^2 d h / 2, causal).
The projections are the model's, stacked as genparity runs them (q|k|v one GEMM, gate|up one GEMM).

usage: cuda_gemm_ceiling.py [--tokens 512] [--peak 989] [--shapes llama3.2-1b,qwen3-0.6b,llama3.1-8b]
"""
import argparse
import statistics

SHAPES = {  # hidden, ffn, heads, kv heads, head dim
    "llama3.2-1b": (2048, 8192, 32, 8, 64),
    "qwen3-0.6b": (1024, 3072, 16, 8, 128),
    "llama3.1-8b": (4096, 14336, 32, 8, 128),
}


def timed(torch, f, iters=20, warm=5, rounds=5):
    for _ in range(warm):
        f()
    ts = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            f()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / iters)  # µs a call
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--peak", type=float, default=989.0, help="dense bf16 TFLOP/s of the GPU")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F

    dev, bf = "cuda", torch.bfloat16
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}; tokens {a.tokens}; peak {a.peak} TFLOP/s")
    print("| shape | op | m x n x k | µs | TFLOP/s | % of peak |")
    print("|---|---|---|---|---|---|")
    n = a.tokens
    for name in a.shapes.split(","):
        h, ffn, nh, nkv, hd = SHAPES[name]
        gemms = [("q|k|v", (nh + 2 * nkv) * hd, h), ("o", h, nh * hd), ("gate|up", 2 * ffn, h), ("down", h, ffn)]
        layer_us = 0.0
        for op, rows, cols in gemms:
            x = torch.randn(n, cols, device=dev, dtype=bf)
            w = torch.randn(rows, cols, device=dev, dtype=bf) * 0.02
            us = timed(torch, lambda: torch.matmul(x, w.t()))
            fl = 2.0 * n * rows * cols
            layer_us += us
            print(f"| {name} | {op} (cuBLAS) | {n} x {rows} x {cols} | {us:.1f} | {fl / us / 1e6:.0f} | "
                  f"{100 * fl / us / 1e6 / a.peak:.1f} |")
        q = torch.randn(1, nh, n, hd, device=dev, dtype=bf)
        k = torch.randn(1, nkv, n, hd, device=dev, dtype=bf)
        v = torch.randn(1, nkv, n, hd, device=dev, dtype=bf)
        us = timed(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
        fl = 4.0 * n * n * hd * nh / 2
        layer_us += us
        print(f"| {name} | attention (SDPA, causal) | {nh} heads x {n} x {n} x {hd} | {us:.1f} | "
              f"{fl / us / 1e6:.0f} | {100 * fl / us / 1e6 / a.peak:.1f} |")
        print(f"| {name} | a layer's GEMMs + attention | | {layer_us:.1f} | | |")


if __name__ == "__main__":
    main()
