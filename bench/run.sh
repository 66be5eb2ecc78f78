#!/bin/sh
# bench/run.sh — `make bench`: writes random-weight bf16 models of three real shapes into build/bench-models/
# (skipped when present), then runs `genparity bench` on all three in one process (llama-bench's method: warm-up,
# pp512 and tg128, 5 repetitions, measured read bandwidth) and writes the Markdown table to build/bench.md.
# Environment: BENCH_ARGS overrides the bench flags (default "-p 512 -n 128 -r 5").
set -eu
BIN=${GENPARITY_BIN:-build/genparity}
DIR=build/bench-models
mkdir -p "$DIR"
MODELS=""
for shape in qwen3-0.6b llama3.2-1b stories110m; do
    out="$DIR/$shape-bf16"
    if [ ! -f "$out/model.safetensors" ]; then
        "$BIN" make-model --shape "$shape" --dtype bf16 -o "$out"
    fi
    MODELS="$MODELS --model $out"
done
{
    echo "# genparity bench — $(date -u '+%Y-%m-%d %H:%M UTC') — $(uname -m), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
    echo
    echo "command: $BIN bench$MODELS ${BENCH_ARGS:--p 512 -n 128 -r 5}"
    echo
    echo "load average before (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg) (other processes share these CPUs)"
    echo
    # shellcheck disable=SC2086
    "$BIN" bench $MODELS ${BENCH_ARGS:--p 512 -n 128 -r 5}
    echo
    echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} > build/bench.md.tmp
mv build/bench.md.tmp build/bench.md
cat build/bench.md
