#!/usr/bin/env python3
"""gemma3_multimodal_fixture.py — re-nests the text-only fixture tiny-gemma3 (Gemma3ForCausalLM) into the
Gemma3ForConditionalGeneration layout, the way Gemma 3 4B/12B/27B checkpoints ship: config.json with the language
model's settings under "text_config" (plus a small vision_config), and the same weight bytes under the multimodal
names, with a few stand-in vision tower / projector tensors that a text-only loader must skip.

Two layouts (python/tests/test_gemma3_multimodal.py builds both at test time; nothing is committed):
  v5      transformers 5: model.language_model.layers.N..., model.language_model.embed_tokens.weight, lm_head (tied)
  legacy  transformers 4 / mlx-vlm / mlx-community: language_model.model.layers.N..., language_model.lm_head...

    python3 tools/gemma3_multimodal_fixture.py SRC_DIR OUT_DIR v5|legacy
Only the standard library is used (the safetensors file is rewritten byte for byte: header renamed, data copied)."""
from __future__ import annotations

import json
import os
import shutil
import struct
import sys

VISION = {  # name -> (dtype, shape): stand-ins of a vision tower and projector (F32 zeros)
    "vision_tower.vision_model.embeddings.patch_embedding.weight": ("F32", [8, 3, 2, 2]),
    "vision_tower.vision_model.post_layernorm.weight": ("F32", [8]),
    "multi_modal_projector.mm_input_projection_weight": ("F32", [8, 64]),
}


def rename(name: str, layout: str) -> str:
    if layout == "v5":
        return "model.language_model." + name[len("model."):] if name.startswith("model.") else name
    return "language_model." + name


def rewrite(src: str, dst: str, layout: str) -> None:
    with open(src, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out, end = {}, len(data)
    for k, v in header.items():
        if k != "__metadata__":
            out[rename(k, layout)] = v
    extra = b""
    for k, (dt, shape) in VISION.items():
        size = 4
        for d in shape:
            size *= d
        out[("model." if layout == "v5" else "") + k] = {"dtype": dt, "shape": shape,
                                                         "data_offsets": [end + len(extra), end + len(extra) + size]}
        extra += bytes(size)
    h = json.dumps(out).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data + extra)


def build(src_dir: str, out_dir: str, layout: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    text = json.load(open(os.path.join(src_dir, "config.json")))
    text.pop("architectures", None)
    lt = text.get("layer_types") or []
    if "full_attention" in lt:  # mlx-lm's gemma3_text reads this period (default 6), not layer_types
        text["sliding_window_pattern"] = lt.index("full_attention") + 1
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
           "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8, "patch_size": 2,
                             "num_hidden_layers": 1, "image_size": 4},
           "image_token_index": 3, "boi_token_index": 4, "eoi_token_index": 5, "mm_tokens_per_image": 4,
           "eos_token_id": text.get("eos_token_id"),
           "vocab_size": text.get("vocab_size")}  # mlx-lm's gemma3 reads it here (default 262208)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    rewrite(os.path.join(src_dir, "model.safetensors"), os.path.join(out_dir, "model.safetensors"), layout)
    for fn in os.listdir(src_dir):
        if fn.startswith(("tokenizer", "generation_config", "special_tokens", "chat_template")):
            shutil.copy(os.path.join(src_dir, fn), out_dir)
    return out_dir


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[3] not in ("v5", "legacy"):
        sys.exit(__doc__)
    print(build(*sys.argv[1:4]))
