"""test_fuse.py — `genparity fuse` against mlx_lm.fuse itself: the same adapter merged into the same base gives a
tensor-for-tensor identical folder (float bases; a 4-bit base re-quantized; a 4-bit base with --dequantize), and
genparity and mlx-lm load the fused folder."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from conftest import ROOT, genparity_bin, model_dir

sys.path.insert(0, str(ROOT / "tools"))
import quant_fixtures  # noqa: E402

import genparity

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mlx_lm") is None,
                                reason="mlx-lm is not installed (pinned in tools/requirements.txt)")


def fuse_both(base, adapter, tmp, extra):
    ours, theirs = tmp / "genparity", tmp / "mlx"
    p = subprocess.run([str(genparity_bin()), "fuse", "--model", str(base), "--adapter", str(adapter), "-o",
                        str(ours), *extra], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([sys.executable, "-m", "mlx_lm", "fuse", "--model", str(base), "--adapter-path", str(adapter),
                        "--save-path", str(theirs), *extra], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return ours, theirs


def assert_same(a_dir, b_dir):
    import mlx.core as mx
    a, b = mx.load(str(a_dir / "model.safetensors")), mx.load(str(b_dir / "model.safetensors"))
    assert sorted(a) == sorted(b)
    bad = [k for k in a if a[k].dtype != b[k].dtype or not mx.array_equal(a[k], b[k]).item()]
    assert not bad, f"tensors that differ from mlx_lm.fuse: {bad}"
    return len(a)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_fuse_float_base(name, tmp_path):
    ours, theirs = fuse_both(model_dir(name), model_dir(name) / "adapter-mlx", tmp_path, [])
    n = assert_same(ours, theirs)
    m, _ = genparity.load(str(ours))
    assert len(genparity.generate_ids(m, [1, 2, 3], 4, temperature=0)) == 4
    print(f"{name}: {n} tensors identical to mlx_lm.fuse")


@pytest.mark.parametrize("extra", [[], ["--dequantize"]], ids=["requantized", "dequantized"])
def test_fuse_quantized_base(extra, fx, tmp_path):
    base = quant_fixtures.build(quant_fixtures.CASES[0], str(fx), str(tmp_path / "q"))
    ours, theirs = fuse_both(base, model_dir("tiny-llama") / "adapter-mlx", tmp_path, extra)
    assert_same(ours, theirs)
    cfg = (ours / "config.json").read_text()
    assert ("quantization" in cfg) == (not extra)
    genparity.load(str(ours))


def test_fuse_bad_arguments(tmp_path):
    m = model_dir("tiny-llama")
    p = subprocess.run([str(genparity_bin()), "fuse", "--model", str(m), "-o", str(tmp_path / "x")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "--adapter" in p.stderr
    p = subprocess.run([str(genparity_bin()), "fuse", "--model", str(m), "--adapter", str(model_dir("tiny-qwen3") /
                        "adapter-mlx"), "-o", str(tmp_path / "y")], capture_output=True, text=True)
    assert p.returncode == 1 and "adapters.safetensors" in p.stderr
