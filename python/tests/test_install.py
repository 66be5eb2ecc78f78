"""test_install.py — `pip install ./python` puts the package and libgenparity.so somewhere else, and the installed
copy works from another directory (no PYTHONPATH into the checkout, no compiler)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT, model_dir


def test_pip_install_then_import_elsewhere(tmp_path):
    target = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target",
                        str(target), str(ROOT / "python")], capture_output=True, text=True, timeout=600)
    if p.returncode and "satisfies the requirement setuptools" in p.stdout + p.stderr:
        pytest.skip("pip cannot fetch setuptools for the isolated build (no package index here)")
    assert p.returncode == 0, p.stdout + p.stderr
    assert (target / "genparity" / "libgenparity.so").is_file()
    code = ("import genparity, sys; m, t = genparity.load(sys.argv[1]); "
            "print(genparity.LIB_PATH); print(genparity.generate(m, t, 'ROMEO:', max_tokens=4, temperature=0))")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GENPARITY_LIB")}
    env["PYTHONPATH"] = str(target)
    r = subprocess.run([sys.executable, "-c", code, str(model_dir("shakespeare-llama"))], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    lib_path, text = r.stdout.split("\n", 1)
    assert lib_path.startswith(str(target)) and text.strip()
    assert not (ROOT / "python" / "genparity" / "libgenparity.so").exists()  # the source folder stays clean
