#!/usr/bin/env python3
"""quant_fixtures.py — builds MLX-quantized model folders from the fixture models with the real tool
(mlx_lm.convert from .venv: mlx[cpu] and mlx-lm pinned in tools/requirements.txt), for the quantization tests.

Nothing it writes is committed: the tests (python/tests/test_quant.py) call build() into a temporary folder, and
this script does the same from the command line for manual runs:

    .venv/bin/python tools/quant_fixtures.py [--fixtures ../shared/fixtures] [--out build/quant-fixtures] [CASE ...]

CASES lists (name, base fixture model, bits, group size, mlx-lm quant predicate or None): every bit width MLX
affine has (2, 3, 4, 5, 6, 8), group sizes 32 and 64, a mixed recipe with per-module overrides (mixed_3_6), tied
and untied lm_heads (a tied lm_head reads the quantized embedding), and modules mlx-lm leaves unquantized (an input
size the group does not divide)."""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys

CASES = [
    ("tiny-llama-q4g32", "tiny-llama", 4, 32, None),       # untied lm_head quantized; down_proj (in 176) stays bf16
    ("tiny-llama-q8g64", "tiny-llama", 8, 64, None),
    ("tiny-qwen3-q8g32", "tiny-qwen3", 8, 32, None),       # tied: lm_head = the quantized embedding
    ("tiny-qwen3-q2g32", "tiny-qwen3", 2, 32, None),
    ("tiny-qwen2-q6g32", "tiny-qwen2", 6, 32, None),       # q/k/v biases
    ("tiny-gemma2-q5g32", "tiny-gemma2", 5, 32, None),
    ("tiny-gemma3-q4g32", "tiny-gemma3", 4, 32, None),
    ("tiny-gemma3-mixed36", "tiny-gemma3", 3, 32, "mixed_3_6"),  # 3-bit with 6-bit overrides per module
]


def build(case: tuple, fixtures: str, out_root: str) -> str:
    """Runs mlx_lm.convert for one case into out_root/<name> (reused when it exists); returns the folder."""
    name, base, bits, group, predicate = case
    out = os.path.join(out_root, name)
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    import mlx.core as mx
    from mlx_lm import convert
    mx.set_default_device(mx.cpu)
    os.makedirs(out_root, exist_ok=True)
    with contextlib.redirect_stdout(io.StringIO()):
        convert(os.path.join(fixtures, "models", base), mlx_path=out, quantize=True, q_bits=bits,
                q_group_size=group, quant_predicate=predicate)
    return out


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", default=os.path.join(here, "..", "..", "shared", "fixtures"))
    ap.add_argument("--out", default=os.path.join(here, "..", "build", "quant-fixtures"))
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    a = ap.parse_args()
    for c in CASES:
        if not a.cases or c[0] in a.cases:
            print(build(c, a.fixtures, a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
