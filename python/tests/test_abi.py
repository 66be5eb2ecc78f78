"""test_abi.py — the ctypes declarations of python/genparity/_ffi.py against include/genparity.h: a small C program,
compiled here, prints every mirrored field's offset and every struct's size; they must equal ctypes' (a header
change that moves a field fails here instead of corrupting memory)."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import ROOT

from genparity import _ffi


def test_struct_layouts_match_the_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to read the header's layout")
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "genparity.h"', "int main(void) {"]
    for cname, cls in _ffi.STRUCTS.items():
        lines.append(f'printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        for f, _ in cls._fields_:
            lines.append(f'printf("{cname} {f} %zu\\n", offsetof({cname}, {f}));')
    lines.append("return 0; }")
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "abi"
    subprocess.run([cc, "-std=c11", "-I", str(ROOT / "include"), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    c = {tuple(line.split()[:2]): int(line.split()[2]) for line in out if line}
    bad = []
    for cname, cls in _ffi.STRUCTS.items():
        import ctypes
        if c[(cname, "sizeof")] != ctypes.sizeof(cls):
            bad.append(f"sizeof({cname}): C {c[(cname, 'sizeof')]}, ctypes {ctypes.sizeof(cls)}")
        for f, _ in cls._fields_:
            if c[(cname, f)] != getattr(cls, f).offset:
                bad.append(f"{cname}.{f}: C offset {c[(cname, f)]}, ctypes {getattr(cls, f).offset}")
    print(f"{len(c)} offsets/sizes compared; mismatches: {bad}")
    assert not bad
