#!/usr/bin/env python3
"""gguf_from_safetensors.py — writes the weights of a `genparity make-model` folder (Llama or Qwen3 shape,
bf16/f16/f32 safetensors) into a GGUF file with the same bytes, so that llama.cpp's llama-bench and genparity bench
read identical weights in a same-run comparison (bench/compare.sh).

It uses gguf-py from a fetched copy of llama.cpp (never committed: pass its folder with --llama-cpp) and numpy.
Only what llama.cpp needs to load and run the model is written: the architecture's hyper-parameters and a
"no_vocab" tokenizer (llama-bench feeds random ids).  q/k rows are written as stored (HF's rotate-half layout);
llama.cpp's converter would permute them for the Llama architecture, which changes which numbers come out but not the
work done per token, so speed is unaffected; the outputs of the two engines are not compared.

usage: gguf_from_safetensors.py --llama-cpp DIR MODEL_DIR OUT.gguf
"""
import argparse
import json
import mmap
import os
import struct
import sys

import numpy as np

HF_TO_GGUF = {  # per-layer HF suffix -> GGUF name (blk.N. prefix added)
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "lm_head.weight": "output.weight"}


def read_safetensors(path):
    """Yields (name, dtype string, shape, raw bytes as a memoryview) for every tensor of one file."""
    f = open(path, "rb")
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    (hlen,) = struct.unpack("<Q", mm[:8])
    header = json.loads(mm[8:8 + hlen])
    base = 8 + hlen
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        yield name, info["dtype"], info["shape"], memoryview(mm)[base + a:base + b]


def gguf_name(hf):
    if hf in TOP:
        return TOP[hf]
    parts = hf.split(".")
    if len(parts) > 3 and parts[0] == "model" and parts[1] == "layers":
        suffix = ".".join(parts[3:])
        if suffix in HF_TO_GGUF:
            return "blk.%s.%s" % (parts[2], HF_TO_GGUF[suffix])
    raise SystemExit("gguf_from_safetensors: no GGUF name for tensor %s" % hf)


def write_hparams(w, gguf, arch, cfg):
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    rope = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    w.add_context_length(cfg.get("max_position_embeddings", 4096))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg.get("num_key_value_heads", cfg["num_attention_heads"]))
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(rope))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_tokenizer_model("no_vocab")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", required=True, help="folder of a fetched llama.cpp copy (for gguf-py)")
    ap.add_argument("model")
    ap.add_argument("out")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.llama_cpp, "gguf-py"))
    import gguf  # noqa: E402  (from the fetched copy)

    cfg = json.load(open(os.path.join(a.model, "config.json")))
    arch = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3"}.get(cfg["architectures"][0])
    if not arch:
        raise SystemExit("gguf_from_safetensors: architecture %s is not handled" % cfg["architectures"][0])
    w = gguf.GGUFWriter(a.out, arch)
    write_hparams(w, gguf, arch, cfg)
    types = {"BF16": (gguf.GGMLQuantizationType.BF16, np.uint16), "F16": (gguf.GGMLQuantizationType.F16, np.float16),
             "F32": (gguf.GGMLQuantizationType.F32, np.float32)}
    files = sorted(f for f in os.listdir(a.model) if f.endswith(".safetensors"))
    for fn in files:
        for name, dt, shape, raw in read_safetensors(os.path.join(a.model, fn)):
            qt, npt = types[dt]
            arr = np.frombuffer(raw, dtype=npt).reshape(shape)
            w.add_tensor(gguf_name(name), arr, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
