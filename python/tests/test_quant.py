"""test_quant.py — MLX-quantized models (mlx_lm.convert -q: affine 2/3/4/5/6/8-bit, per-module overrides) loaded by
genparity and checked against mlx-lm's own forward (MLX on CPU), the oracle of this format.

The folders are made at test time by tools/quant_fixtures.py (nothing quantized is committed).  mlx-lm runs with its
floating parameters (norms, unquantized weights, scales and biases) widened to float32 — exact — so both engines
compute in float32 over the same stored integers; what remains is summation order and MLX's factored quantized
matmul (scale * sum(q x) + bias * sum(x)) against genparity's dequantize-then-dot.  Stated tolerance: last-position
logits within 1e-3 (max abs), and greedy continuations identical."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, reference

import genparity

sys.path.insert(0, str(ROOT / "tools"))
import quant_fixtures  # noqa: E402

TOL = 1e-3
N_GREEDY = 24
# mlx-lm's gemma2 attends the whole context (no sliding window; transformers and genparity slide): compare it only
# while prompt + generated tokens fit in the window.
MLX_NO_SLIDING = {"gemma2"}


@pytest.fixture(scope="module")
def qdir(fx, tmp_path_factory):
    if importlib.util.find_spec("mlx_lm") is None:
        pytest.skip("mlx-lm is not installed (pinned in tools/requirements.txt)")
    return tmp_path_factory.mktemp("quant")


def mlx_config(path):
    """mlx-lm's gemma3_text reads sliding_window_pattern (default 6) rather than layer_types: give it the period of
    layer_types (tiny-gemma3 has 3 layers, sliding, sliding, full)."""
    cfg = json.loads((Path(path) / "config.json").read_text())
    lt = cfg.get("layer_types")
    if cfg.get("model_type") == "gemma3_text" and lt and "full_attention" in lt:
        return {"sliding_window_pattern": lt.index("full_attention") + 1}
    return None


def mlx_f32(path):
    import mlx.core as mx
    import mlx_lm
    from mlx.utils import tree_map
    mx.set_default_device(mx.cpu)
    m, _ = mlx_lm.load(path, model_config=mlx_config(path))
    m.update(tree_map(lambda p: p.astype(mx.float32) if mx.issubdtype(p.dtype, mx.floating) else p, m.parameters()))
    return m


def mlx_logits(m, ids):
    import mlx.core as mx
    return np.array(m(mx.array([ids]))[0, -1].astype(mx.float32))


def mlx_greedy(m, ids, n):
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache
    cache = make_prompt_cache(m)
    out, x = [], mx.array([ids])
    for _ in range(n):
        t = int(mx.argmax(m(x, cache=cache)[0, -1]).item())
        out.append(t)
        x = mx.array([[t]])
    return out


def greedy(gm, ids, n):
    """n argmax tokens from a genparity context (EOS not special: the same loop as mlx_greedy)."""
    cache = genparity.PromptCache(gm)
    try:
        out, logits = [], cache.eval(ids)[0]
        for _ in range(n):
            out.append(int(np.argmax(logits)))
            logits = cache.eval([out[-1]])[0]
        return out
    finally:
        cache.close()


@pytest.mark.parametrize("case", quant_fixtures.CASES, ids=[c[0] for c in quant_fixtures.CASES])
def test_quantized_vs_mlx_lm(case, fx, qdir):
    path = quant_fixtures.build(case, str(fx), str(qdir))
    ref = reference(case[1])
    gm, _ = genparity.load(path)
    mm = mlx_f32(path)
    cfg = json.loads((Path(path) / "config.json").read_text())
    window = cfg.get("sliding_window") if cfg.get("model_type") in MLX_NO_SLIDING else None
    worst, compared = 0.0, 0
    for i, p in enumerate(ref["prompts"]):
        n = N_GREEDY if window is None else min(N_GREEDY, window - len(p["ids"]))
        if n < 0:
            continue
        compared += 1
        ours = gm.forward(p["ids"])[0]
        theirs = mlx_logits(mm, p["ids"])
        err = float(np.max(np.abs(ours - theirs)))
        worst = max(worst, err)
        assert err <= TOL, f"{case[0]} prompt {i}: max |logit diff| {err:.3g} > {TOL}"
        g = greedy(gm, p["ids"], n)
        assert g == mlx_greedy(mm, p["ids"], n), f"{case[0]} prompt {i}: greedy tokens differ"
    assert compared > 0
    print(f"{case[0]}: {compared} prompts, max |logit diff| vs mlx-lm float32 = {worst:.3g} (tolerance {TOL}); greedy identical")
