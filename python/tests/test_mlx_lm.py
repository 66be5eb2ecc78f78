"""test_mlx_lm.py — the same greedy prompts through mlx_lm.generate and genparity.generate on a fixture model
(tiny-llama, a Hugging Face llama folder that mlx_lm.load reads), where mlx-lm is installed.

Difference found and documented here: mlx-lm computes in the weights' dtype (bf16 for this fixture), so its greedy
text can leave transformers' float32 path (prompt 1 of tiny-llama differs from token 34 on, mlx 0.32.4 CPU); with the
parameters cast to float32 mlx-lm gives genparity's (= transformers' float32) text for every prompt.  The test
asserts the float32 equality and prints the bf16 agreement."""
from __future__ import annotations

import pytest
from conftest import model_dir, reference

import genparity


def test_mlx_lm_generate_vs_genparity():
    mlx_lm = pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pinned in tools/requirements.txt)")
    mx = pytest.importorskip("mlx.core")
    from mlx.utils import tree_map
    d = str(model_dir("tiny-llama"))
    ref = reference("tiny-llama")
    gm, gt = genparity.load(d)
    mm, mt = mlx_lm.load(d)
    ours = [genparity.generate(gm, gt, p["ids"], 48, temperature=0) for p in ref["prompts"]]
    assert ours == [gt.decode(p["greedy_48"], skip_special_tokens=True) for p in ref["prompts"]]
    native = [mlx_lm.generate(mm, mt, p["ids"], max_tokens=48) for p in ref["prompts"]]
    same = sum(a == b for a, b in zip(native, ours))
    print(f"mlx-lm in the weights' dtype (bf16): {same}/{len(ours)} prompts give genparity's text")
    mm.update(tree_map(lambda p: p.astype(mx.float32), mm.parameters()))
    f32 = [mlx_lm.generate(mm, mt, p["ids"], max_tokens=48) for p in ref["prompts"]]
    for i, (a, b) in enumerate(zip(f32, ours)):
        assert a == b, f"prompt {i}: mlx-lm float32 {a!r} != genparity {b!r}"
    print(f"mlx-lm in float32: {len(ours)}/{len(ours)} prompts give genparity's text")
