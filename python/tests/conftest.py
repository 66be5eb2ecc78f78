"""conftest.py — shared pytest fixtures of the Python tests: the fixtures folder (the parity oracle), the checkout's
build/ (genparity binary, libgenparity.so), and a `genparity serve` process on a free loopback port.

A missing fixture folder skips locally and fails under CI=true, like the C suite."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
CI = os.environ.get("CI") == "true"


def fixtures_dir() -> Path:
    return Path(os.environ.get("GENPARITY_FIXTURES", ROOT.parent / "shared" / "fixtures"))


def need(path: Path) -> Path:
    """Returns path, or skips (fails under CI=true) when it is missing."""
    if not path.exists():
        if CI:
            pytest.fail(f"missing fixture {path} (CI=true: a missing fixture is a failure)")
        pytest.skip(f"missing fixture {path}")
    return path


@pytest.fixture(scope="session")
def fx() -> Path:
    return need(fixtures_dir())


def model_dir(name: str) -> Path:
    return need(fixtures_dir() / "models" / name)


def reference(name: str) -> dict:
    return json.loads((model_dir(name) / "reference.json").read_text())


def genparity_bin() -> Path:
    return Path(os.environ.get("GENPARITY_BIN", ROOT / "build" / "genparity")).resolve()


class Server:
    """A running `genparity serve`; .url is http://127.0.0.1:PORT."""

    def __init__(self, model: Path, *args: str):
        self.log = []
        cmd = [str(genparity_bin()), "serve", "--model", str(model), "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        m = None
        while not m:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on (http://\S+?:\d+)", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"genparity serve did not start: {''.join(self.log)}{self.proc.stderr.read()}")
        self.url = m.group(1)

    def health(self) -> dict:
        with urllib.request.urlopen(self.url + "/health", timeout=30) as r:
            return json.loads(r.read())

    def stop(self, sig=signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout)
        self.log.append(self.proc.stderr.read())
        return rc


@pytest.fixture
def start_server():
    started = []

    def start(model: Path, *args: str) -> Server:
        s = Server(model, *args)
        started.append(s)
        return s
    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def post(url: str, body, headers: dict | None = None, raw: bytes | None = None, timeout: float = 60):
    """POSTs JSON (or raw bytes); returns (status, headers, parsed JSON or text)."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, hdrs, text = r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        status, hdrs, text = e.code, dict(e.headers), e.read().decode()
    try:
        return status, hdrs, json.loads(text)
    except ValueError:
        return status, hdrs, text
