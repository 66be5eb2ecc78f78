#!/bin/sh
# python-tests.sh — the Python part of `make test`: pytest over python/tests (the genparity package and
# `genparity serve`) from the test-only .venv (scripts/venv.sh, pinned in tools/requirements.txt).
#   usage: sh scripts/python-tests.sh [PATTERN]   (PATTERN: pytest -k, like make test T=...)
# Without .venv, or without one of its packages, it prints one SKIPPED line and succeeds; under CI=true that is a
# failure.  pytest's exit code 5 (no test selected by PATTERN) counts as success.
cd "$(dirname "$0")/.." || exit 1
PY=.venv/bin/python
skip() {
    if [ "$CI" = true ]; then echo "python tests: FAILED: $1 (CI=true: run sh scripts/venv.sh)"; exit 1; fi
    echo "python tests: SKIPPED: $1 (run sh scripts/venv.sh to create it)"
    exit 0
}
[ -x "$PY" ] || skip ".venv is missing"
for pkg in pytest numpy safetensors openai mlx_lm; do
    if ! "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$pkg') is None)" 2>/dev/null; then
        # pytest, numpy and safetensors are needed by every test; openai and mlx_lm only by their own files,
        # which skip themselves with a reason when the package is absent
        case $pkg in openai|mlx_lm) [ "$CI" = true ] && skip "package $pkg is not in .venv";
            echo "python tests: package $pkg is not in .venv; the tests that need it are skipped" ;;
        *) skip "package $pkg is not in .venv" ;; esac
    fi
done
case "$1" in *[!A-Za-z0-9_]*) echo "python tests: not run for T=$1 (a pytest -k pattern is letters, digits, _)"; exit 0;; esac
export GENPARITY_BIN="${GENPARITY_BIN:-build/genparity}" PYTHONPATH="python${PYTHONPATH:+:$PYTHONPATH}"
if [ -n "$1" ]; then "$PY" -m pytest -q -p no:cacheprovider python/tests -k "$1"
else "$PY" -m pytest -q -p no:cacheprovider python/tests; fi
rc=$?
[ $rc -eq 5 ] && { echo "python tests: no test matches '$1'"; exit 0; }
exit $rc
