"""test_quantize.py — `genparity quantize` against MLX itself: for the same weights, mlx.core.quantize and genparity
give identical integers, scales and biases (every bit width, group 32/64/128, float32/bf16/f16 weights, edge-case
groups); on the fixture models genparity's folder is tensor-for-tensor identical to mlx_lm.convert's and mlx_lm.load
reads it; bad arguments are refused with a message."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, genparity_bin, model_dir

sys.path.insert(0, str(ROOT / "tools"))
import quant_fixtures  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlx_lm") is None,
                                reason="mlx-lm is not installed (pinned in tools/requirements.txt)")


def quantize(src, out, bits, group):
    return subprocess.run([str(genparity_bin()), "quantize", "--model", str(src), "--bits", str(bits),
                           "--group-size", str(group), "-o", str(out)], capture_output=True, text=True, timeout=300)


def test_same_integers_scales_biases_as_mlx(tmp_path):
    import mlx.core as mx
    mx.set_default_device(mx.cpu)
    rng = np.random.default_rng(7)
    w = rng.standard_normal((6, 256)).astype(np.float32)
    w[1, :] = 0.25                 # constant groups (scale clamps to eps)
    w[2, :] = -np.abs(w[2, :])      # all negative
    w[3, :128] *= 1e-6              # tiny values
    w[4, ::2] = 0.0
    tensors = {"{}.{}_proj.weight".format(d, "q"): mx.array(w).astype(getattr(mx, d))
               for d in ("float32", "bfloat16", "float16")}
    src = tmp_path / "src"
    src.mkdir()
    mx.save_safetensors(str(src / "model.safetensors"), tensors)
    (src / "config.json").write_text("{}")
    checked = 0
    for bits in (2, 3, 4, 5, 6, 8):
        for group in (32, 64, 128):
            out = tmp_path / f"b{bits}g{group}"
            p = quantize(src, out, bits, group)
            assert p.returncode == 0, p.stderr
            ours = mx.load(str(out / "model.safetensors"))
            for name, arr in tensors.items():
                q, s, b = mx.quantize(arr, group_size=group, bits=bits)
                base = name[:-len(".weight")]
                for mine, theirs in ((ours[name], q), (ours[base + ".scales"], s), (ours[base + ".biases"], b)):
                    assert mine.dtype == theirs.dtype and mine.shape == theirs.shape, (name, bits, group)
                    assert mx.array_equal(mine, theirs).item(), (name, bits, group)
                checked += 1
            cfg = json.loads((out / "config.json").read_text())
            assert cfg["quantization"] == {"group_size": group, "bits": bits, "mode": "affine"}
    print(f"{checked} (weight dtype, bits, group) quantizations identical to mlx.core.quantize")


@pytest.mark.parametrize("case", quant_fixtures.CASES[:4], ids=[c[0] for c in quant_fixtures.CASES[:4]])
def test_folder_identical_to_mlx_lm_convert(case, fx, tmp_path):
    import mlx.core as mx
    import mlx_lm
    name, base, bits, group, predicate = case
    theirs = quant_fixtures.build(case, str(fx), str(tmp_path))
    mine = tmp_path / (name + "-genparity")
    p = quantize(model_dir(base), mine, bits, group)
    assert p.returncode == 0, p.stderr
    a, b = mx.load(str(mine / "model.safetensors")), mx.load(theirs + "/model.safetensors")
    assert sorted(a) == sorted(b)
    assert all(mx.array_equal(a[k], b[k]).item() and a[k].dtype == b[k].dtype for k in a)
    m, _ = mlx_lm.load(str(mine))  # mlx-lm reads genparity's folder
    out = m(mx.array([[1, 2, 3]]))
    assert out.shape[-1] > 0


def test_bad_arguments(tmp_path):
    src = model_dir("tiny-llama")
    for bits, group, words in ((7, 64, "bits"), (4, 48, "group_size")):
        p = quantize(src, tmp_path / f"bad{bits}{group}", bits, group)
        assert p.returncode != 0 and words in p.stderr, p.stderr
    out = tmp_path / "q"
    assert quantize(src, out, 4, 32).returncode == 0
    p = quantize(src, out, 4, 32)  # the folder already holds a model
    assert p.returncode != 0 and "already holds a model" in p.stderr
    p = quantize(out, tmp_path / "qq", 4, 32)  # an already quantized model
    assert p.returncode != 0 and "already quantized" in p.stderr
