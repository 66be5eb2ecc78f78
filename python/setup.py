"""setup.py — puts libgenparity.so into the package at build time: $GENPARITY_LIB if set, else the checkout's
build/libgenparity.so (built with `make build/libgenparity.so` first when it is missing and make is available).
The bindings are ctypes, so nothing is compiled for Python itself."""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent


class BuildPyWithLib(build_py):
    def run(self):
        src = os.environ.get("GENPARITY_LIB")
        lib = Path(src) if src else CHECKOUT / "build" / "libgenparity.so"
        if not lib.is_file() and not src and (CHECKOUT / "Makefile").is_file() and shutil.which("make"):
            subprocess.run(["make", "-C", str(CHECKOUT), "build/libgenparity.so"], check=True)
        if not lib.is_file():
            raise SystemExit(f"genparity: {lib} not found; run `make` in the checkout or set GENPARITY_LIB")
        super().run()
        dest = Path(self.build_lib) / "genparity"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(lib, dest / "libgenparity.so")  # into the build tree only, never the source folder


setup(cmdclass={"build_py": BuildPyWithLib})
