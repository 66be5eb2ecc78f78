"""cuda_bf16_diff.py — where genparity's CUDA bf16 mode and transformers' bf16 sdpa forward on the GPU part ways.

For one fixture model and prompt: transformers (dtype bf16, attn_implementation sdpa, on cuda) and genparity
(device cuda, compute bf16, through libgenparity.so) run the same ids; per hidden state (0 = embeddings, i = after
layer i) it prints the share of elements that are bit-identical and the largest difference, then greedy-decodes N
tokens with both and prints, at the first step where they choose differently, each engine's top-2 logit margin.
Run on the GPU machine (torch, transformers there) with GENPARITY_LIB=build-cuda/libgenparity.so:
  python3 tools/cuda_bf16_diff.py FIXTURES/models/shakespeare-llama [--prompt K] [-n 48]
"""
import argparse
import ctypes
import json
import os
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from genparity import _ffi  # noqa: E402


def gp_ctx(lib, model_dir):
    mp = _ffi.GpModelParams()
    mp.load_tokenizer = 0
    m = ctypes.c_void_p()
    if lib.gp_model_load(model_dir.encode(), ctypes.byref(mp), ctypes.byref(m)):
        sys.exit("gp_model_load: " + lib.gp_errmsg().decode())
    p = lib.gp_ctx_default_params()
    p.device, p.compute = 1, 1
    c = ctypes.c_void_p()
    if lib.gp_ctx_init(m, ctypes.byref(p), ctypes.byref(c)):
        sys.exit("gp_ctx_init: " + lib.gp_errmsg().decode())
    return m, c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--prompt", type=int, default=0)
    ap.add_argument("-n", type=int, default=48)
    a = ap.parse_args()
    ids = json.load(open(os.path.join(a.model, "reference.json")))["prompts"][a.prompt]["ids"]
    hf = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
    lib = _ffi.lib
    m, c = gp_ctx(lib, a.model)
    L, E, V = hf.config.num_hidden_layers, hf.config.hidden_size, hf.config.vocab_size
    with torch.no_grad():
        out = hf(torch.tensor([ids]).cuda(), output_hidden_states=True)
    layers = np.arange(L + 1, dtype=np.int32)
    hid = np.zeros((L + 1, len(ids), E), np.float32)
    logits = np.zeros(V, np.float32)
    o = _ffi.GpEvalOpts()
    o.hidden_layers = layers.ctypes.data_as(_ffi.i32p)
    o.n_hidden_layers = L + 1
    o.hidden_out = hid.ctypes.data_as(_ffi.f32p)
    arr = np.array(ids, np.int32)
    if lib.gp_ctx_eval(c, arr.ctypes.data_as(_ffi.i32p), len(ids), ctypes.byref(o), logits.ctypes.data_as(_ffi.f32p)):
        sys.exit("gp_ctx_eval: " + lib.gp_errmsg().decode())
    for i in range(L + 1):
        t = out.hidden_states[i][0].float().cpu().numpy()
        same, diff = np.mean(t == hid[i]) * 100, np.abs(t - hid[i]).max()
        print(f"hidden {i:2d}: {same:6.2f}% bit-identical, max |diff| {diff:.4g}")
    t = out.logits[0, -1].float().cpu().numpy()
    print(f"last logits: {np.mean(t == logits) * 100:.2f}% identical, max |diff| {np.abs(t - logits).max():.4g}")
    with torch.no_grad():
        g = hf.generate(torch.tensor([ids]).cuda(), max_new_tokens=a.n, do_sample=False, output_scores=True,
                        return_dict_in_generate=True)
    hf_tok = g.sequences[0, len(ids):].tolist()
    lg = logits
    for step, tok in enumerate(hf_tok):
        mine = int(np.argmax(lg))
        hs = g.scores[step][0].float().cpu().numpy()
        if mine != tok:
            s1 = np.sort(lg)[-2:]
            s2 = np.sort(hs)[-2:]
            print(f"step {step}: transformers {tok} (top-2 margin {s2[1] - s2[0]:.4g}), genparity {mine} (margin "
                  f"{s1[1] - s1[0]:.4g}); genparity's logit of transformers' token {lg[tok]:.4g} vs its own "
                  f"{lg[mine]:.4g}; max |diff| of this step's logits {np.abs(hs - lg).max():.4g}")
            return
        one = np.array([tok], np.int32)
        if lib.gp_ctx_eval(c, one.ctypes.data_as(_ffi.i32p), 1, None, lg.ctypes.data_as(_ffi.f32p)):
            sys.exit("gp_ctx_eval: " + lib.gp_errmsg().decode())
    print(f"greedy: {a.n} tokens identical")


if __name__ == "__main__":
    main()
