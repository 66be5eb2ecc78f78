"""test_gemma3_multimodal.py — Gemma3ForConditionalGeneration checkpoints (Gemma 3 4B/12B/27B): the language model
loads from both nestings (transformers 5: model.language_model.*; transformers 4 / mlx-vlm / mlx-community:
language_model.model.*), settings from text_config, vision tensors skipped.  Oracle: tiny-gemma3 re-nested by
tools/gemma3_multimodal_fixture.py (the same weight bytes) must give the text-only model's logits bit for bit and its
transformers greedy_48; an mlx_lm.convert 4-bit conversion of the multimodal folder is checked against mlx-lm."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from conftest import ROOT, model_dir, reference

import genparity

sys.path.insert(0, str(ROOT / "tools"))
import gemma3_multimodal_fixture as g3  # noqa: E402


@pytest.mark.parametrize("layout", ["v5", "legacy"])
def test_multimodal_layout_equals_text_model(layout, tmp_path):
    base = model_dir("tiny-gemma3")
    folder = g3.build(str(base), str(tmp_path / layout), layout)
    ref = reference("tiny-gemma3")
    mm, _ = genparity.load(folder)
    tm, _ = genparity.load(str(base))
    assert mm.arch == "Gemma3ForConditionalGeneration"
    for i, p in enumerate(ref["prompts"]):
        a, b = mm.forward(p["ids"])[0], tm.forward(p["ids"])[0]
        assert np.array_equal(a, b), f"prompt {i}: logits differ from the text-only model"
        assert genparity.generate_ids(mm, p["ids"], 48, temperature=0) == p["greedy_48"], f"prompt {i}"


def test_multimodal_mlx_quantized(tmp_path):
    if importlib.util.find_spec("mlx_lm") is None:
        pytest.skip("mlx-lm is not installed (pinned in tools/requirements.txt)")
    import contextlib
    import io

    import mlx.core as mx
    import mlx_lm
    from mlx.utils import tree_map
    mx.set_default_device(mx.cpu)
    folder = g3.build(str(model_dir("tiny-gemma3")), str(tmp_path / "legacy"), "legacy")
    q = str(tmp_path / "q4")
    with contextlib.redirect_stdout(io.StringIO()):
        mlx_lm.convert(folder, mlx_path=q, quantize=True, q_bits=4, q_group_size=32)
    gm, _ = genparity.load(q)
    m, _ = mlx_lm.load(q)
    m.update(tree_map(lambda p: p.astype(mx.float32) if mx.issubdtype(p.dtype, mx.floating) else p, m.parameters()))
    worst = 0.0
    for p in reference("tiny-gemma3")["prompts"]:
        theirs = np.array(m(mx.array([p["ids"]]))[0, -1].astype(mx.float32))
        worst = max(worst, float(np.max(np.abs(gm.forward(p["ids"])[0] - theirs))))
    print(f"multimodal 4-bit vs mlx-lm float32: max |logit diff| {worst:.3g} (tolerance 1e-3)")
    assert worst <= 1e-3


def test_image_input_is_refused(tmp_path):
    import json
    import subprocess
    from conftest import genparity_bin
    msgs = tmp_path / "m.json"
    msgs.write_text(json.dumps([{"role": "user", "content": [{"type": "image", "url": "cat.png"},
                                                             {"type": "text", "text": "What is this?"}]}]))
    p = subprocess.run([str(genparity_bin()), "generate", "--model", str(model_dir("tiny-qwen3")), "--messages",
                        str(msgs)], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "image" in p.stderr and "not supported" in p.stderr, p.stderr
