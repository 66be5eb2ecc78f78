#!/bin/sh
# venv.sh — creates .venv (a Python virtual environment for tests and reference tools, never used by the library or
# the CLI) and installs the pinned packages of tools/requirements.txt into it.  Idempotent: a .venv whose stamp
# matches the requirements file is left alone.  Needs python3 with venv (Debian: python3-venv).
set -e
cd "$(dirname "$0")/.."
req=tools/requirements.txt
if [ -f .venv/.stamp ] && cmp -s .venv/.stamp "$req"; then exit 0; fi
command -v python3 >/dev/null 2>&1 || { echo "venv.sh: python3 is missing (apt-get install python3 python3-venv)" >&2; exit 1; }
python3 -m venv .venv || { echo "venv.sh: python3 -m venv failed (apt-get install python3-venv)" >&2; exit 1; }
.venv/bin/python -m pip install -q --upgrade pip >&2
.venv/bin/python -m pip install -q -r "$req" >&2
cp "$req" .venv/.stamp
