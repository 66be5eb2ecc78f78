"""test_abi.py — the ctypes declarations of python/genparity/_ffi.py against include/genparity.h: a small C program,
compiled here, prints every mirrored field's offset and every struct's size; they must equal ctypes' (a header
change that moves a field fails here instead of corrupting memory)."""
from __future__ import annotations

import ctypes
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
    # the library fills these two through spare-tailed buffers (GpGenConfigBuf, GpGenResultBuf): fields appended to
    # them in the header are allowed (they keep the library's defaults) as long as they fit in the spare bytes
    tailed = {"gp_gen_config": _ffi.GpGenConfigBuf, "gp_gen_result": _ffi.GpGenResultBuf}
    for cname, cls in _ffi.STRUCTS.items():
        size = c[(cname, "sizeof")]
        if cname in tailed:
            if not ctypes.sizeof(cls) <= size <= ctypes.sizeof(tailed[cname]):
                bad.append(f"sizeof({cname}): C {size}, ctypes {ctypes.sizeof(cls)}..{ctypes.sizeof(tailed[cname])}")
        elif size != ctypes.sizeof(cls):
            bad.append(f"sizeof({cname}): C {size}, ctypes {ctypes.sizeof(cls)}")
        for f, _ in cls._fields_:
            if c[(cname, f)] != getattr(cls, f).offset:
                bad.append(f"{cname}.{f}: C offset {c[(cname, f)]}, ctypes {getattr(cls, f).offset}")
    print(f"{len(c)} offsets/sizes compared; mismatches: {bad}")
    assert not bad
