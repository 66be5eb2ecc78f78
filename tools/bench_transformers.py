#!/usr/bin/env python3
"""bench_transformers.py — transformers' speed on a model folder, measured as llama-bench and `genparity bench` do,
for the same-run comparison on the GPU machine (`DEVICE=cuda TRANSFORMERS=1 sh bench/compare.sh`).  Runs where
torch and transformers are installed (the GPU machine); never part of the product.

  pp P : one forward of P random ids into an empty cache (torch.cuda.synchronize around it), tokens/s;
  tg N : `generate` from one random id with max_new_tokens = min_new_tokens = N, greedy, tokens/s
         (N / wall time, which includes transformers' Python overhead: that is what a user of generate() gets).
One warm-up of each, then R repetitions; prints one JSON object: mean and sd of each.

usage: bench_transformers.py MODEL_DIR [-p 512] [-n 128] [-r 3] [--dtype bfloat16|float32] [--attn sdpa|eager]
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    a = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    dev = "cuda"
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=getattr(torch, a.dtype),
                                                 attn_implementation=a.attn).to(dev).eval()
    vocab = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(0)

    def pp():
        ids = torch.randint(0, vocab, (1, a.p), generator=g).to(dev)
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            model(ids, use_cache=True, logits_to_keep=1)
        torch.cuda.synchronize()
        return a.p / (time.perf_counter() - t)

    def tg():
        ids = torch.randint(0, vocab, (1, 1), generator=g).to(dev)
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=a.n, min_new_tokens=a.n, do_sample=False,
                                 pad_token_id=0, eos_token_id=None)
        torch.cuda.synchronize()
        assert out.shape[1] == a.n + 1, out.shape
        return a.n / (time.perf_counter() - t)

    pp(), tg()  # warm-up
    p = [pp() for _ in range(a.r)]
    n = [tg() for _ in range(a.r)]
    sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
    json.dump({"engine": "transformers %s %s %s" % (__import__("transformers").__version__, a.dtype, a.attn),
               "model": a.model, "p": a.p, "n": a.n, "r": a.r,
               "pp_tokens_per_s": statistics.mean(p), "pp_sd": sd(p),
               "tg_tokens_per_s": statistics.mean(n), "tg_sd": sd(n)}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
