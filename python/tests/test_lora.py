"""test_lora.py — LoRA adapters from Python: load(path, adapter_path=...) reproduces the fixtures' lora.greedy_48
(transformers with the adapter merged) for both layouts; a cache swaps adapters without reloading the model; and
mlx-lm's own adapter loading (mlx_lm.load(path, adapter_path=...), parameters widened to float32) gives the same
greedy text as genparity."""
from __future__ import annotations

import pytest
from conftest import model_dir, reference

import genparity

CASES = [(m, lay) for m in ("tiny-llama", "tiny-qwen3") for lay in ("adapter-mlx", "adapter-peft")]


@pytest.mark.parametrize("name,layout", CASES)
def test_lora_greedy_reference(name, layout):
    ref = reference(name)
    m, tok = genparity.load(str(model_dir(name)), adapter_path=str(model_dir(name) / layout))
    for i, p in enumerate(ref["prompts"]):
        got = genparity.generate_ids(m, p["ids"], 48, temperature=0)
        assert got == ref["lora"]["greedy_48"][i], f"{name} {layout} prompt {i}"


def test_lora_hot_swap():
    name = "tiny-llama"
    ref = reference(name)
    m, _ = genparity.load(str(model_dir(name)))
    a = m.load_adapter(str(model_dir(name) / "adapter-peft"))
    cache = genparity.make_prompt_cache(m)
    ids = ref["prompts"][0]["ids"]
    plain = genparity.generate_ids(m, ids, 48, temperature=0, prompt_cache=cache)
    assert plain == ref["prompts"][0]["greedy_48"]
    cache.reset()  # an explicit cache that holds tokens is continued (mlx-lm's convention): start over
    cache.set_adapters([a])
    assert genparity.generate_ids(m, ids, 48, temperature=0, prompt_cache=cache) == ref["lora"]["greedy_48"][0]
    cache.reset()
    cache.set_adapters([])
    assert genparity.generate_ids(m, ids, 48, temperature=0, prompt_cache=cache) == plain
    with pytest.raises(genparity.GenparityError, match="adapter_config.json"):
        m.load_adapter(str(model_dir(name)))


def test_lora_vs_mlx_lm():
    mlx_lm = pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pinned in tools/requirements.txt)")
    mx = pytest.importorskip("mlx.core")
    from mlx.utils import tree_map
    mx.set_default_device(mx.cpu)
    name = "tiny-llama"
    d = str(model_dir(name))
    ref = reference(name)
    gm, gt = genparity.load(d, adapter_path=d + "/adapter-mlx")
    mm, mt = mlx_lm.load(d, adapter_path=d + "/adapter-mlx")
    mm.update(tree_map(lambda p: p.astype(mx.float32) if mx.issubdtype(p.dtype, mx.floating) else p,
                       mm.parameters()))
    for i, p in enumerate(ref["prompts"]):
        ours = genparity.generate(gm, gt, p["ids"], 32, temperature=0)
        theirs = mlx_lm.generate(mm, mt, p["ids"], max_tokens=32)
        assert ours == theirs, f"prompt {i}: genparity {ours!r} != mlx-lm {theirs!r}"


def test_qlora_vs_mlx_lm(fx, tmp_path):
    """An adapter on a 4-bit base (QLoRA): genparity's unfused terms on the quantized linears against mlx-lm's."""
    mlx_lm = pytest.importorskip("mlx_lm", reason="mlx-lm is not installed (pinned in tools/requirements.txt)")
    mx = pytest.importorskip("mlx.core")
    import sys

    import numpy as np
    from conftest import ROOT
    from mlx.utils import tree_map
    sys.path.insert(0, str(ROOT / "tools"))
    import quant_fixtures
    mx.set_default_device(mx.cpu)
    base = quant_fixtures.build(quant_fixtures.CASES[0], str(fx), str(tmp_path))
    adapter = str(model_dir("tiny-llama") / "adapter-mlx")
    gm, gt = genparity.load(base, adapter_path=adapter)
    mm, mt = mlx_lm.load(base, adapter_path=adapter)
    mm.update(tree_map(lambda p: p.astype(mx.float32) if mx.issubdtype(p.dtype, mx.floating) else p,
                       mm.parameters()))
    worst = 0.0
    for p in reference("tiny-llama")["prompts"]:
        theirs = np.array(mm(mx.array([p["ids"]]))[0, -1].astype(mx.float32))
        worst = max(worst, float(np.max(np.abs(gm.forward(p["ids"])[0] - theirs))))
        assert genparity.generate(gm, gt, p["ids"], 24, temperature=0) == mlx_lm.generate(mm, mt, p["ids"],
                                                                                         max_tokens=24)
    print(f"QLoRA (4-bit base + adapter) vs mlx-lm float32: max |logit diff| {worst:.3g} (tolerance 1e-3)")
    assert worst <= 1e-3


def test_server_with_adapter(start_server):
    """`genparity serve --adapter DIR`: every slot runs the adapter (the lora.greedy_48 reference over HTTP)."""
    from conftest import post
    name = "tiny-llama"
    ref = reference(name)
    srv = start_server(model_dir(name), "--adapter", str(model_dir(name) / "adapter-peft"))
    p = ref["prompts"][0]
    status, _, body = post(srv.url + "/v1/completions", {"prompt": p["ids"], "max_tokens": 48, "temperature": 0,
                                                         "ignore_eos": True})
    assert status == 200, body
    m, tok = genparity.load(str(model_dir(name)))
    assert body["choices"][0]["text"] == tok.decode(ref["lora"]["greedy_48"][0])
