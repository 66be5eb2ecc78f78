#!/bin/sh
# bench/compare.sh — `make bench-compare`: genparity against llama.cpp, side by side in one run on the same weights.
#   For each shape: `genparity make-model` writes a random-weight folder (once), tools/gguf_from_safetensors.py copies
#   the same bytes into a GGUF (once), then ROUNDS rounds run `genparity bench` and llama.cpp's `llama-bench`
#   alternately (pp P and tg N, REPS repetitions each, THREADS threads).  The report (build/compare.md) lists every
#   round, the load average before and after, the medians, and each genparity row's ratio to the llama.cpp row of
#   the same weights (bf16 for either compute mode).
# Needs llama.cpp built ad hoc from a fetched copy (never committed): LLAMA_BENCH = its llama-bench binary,
# LLAMA_CPP_DIR = the copy (for gguf-py).  Optional LLAMA_QUANTIZE = its llama-quantize, with QUANTS="q8_0 q4_0",
# adds rows for llama.cpp's quantized types; GQUANTS="q4 q8" adds genparity rows on MLX-quantized folders of the
# same weights (mlx_lm.convert -q --q-group-size GROUP, default 64, made once from the bf16 folder with .venv's
# mlx-lm); the report then pairs genparity qN with llama.cpp qN_0 when both ran.
# Environment: SHAPES (default "qwen3-0.6b llama3.2-1b"), ROUNDS (3), REPS (3), P (512), N (128), THREADS (2),
# GENPARITY_BIN (build/genparity), PYTHON (.venv/bin/python, else python3), GENPARITY_ARGS (extra bench flags),
# GBF16=1 (adds a genparity row with --compute bf16), LLAMA_ARGS (extra llama-bench flags), DEPTH (both engines'
# -d: the tests run on a cache already holding DEPTH tokens; default 0; not with TRANSFORMERS).
# On the GPU machine: DEVICE=cuda runs `genparity bench --device cuda` (a `make cuda` build) and llama-bench with all
# layers offloaded (-ngl 99; llama.cpp built with GGML_CUDA=ON); TRANSFORMERS=1 adds transformers' rows
# (tools/bench_transformers.py, bf16, sdpa; PYTHON must hold torch and transformers).
set -eu
: "${LLAMA_BENCH:?set LLAMA_BENCH to the llama-bench of llama.cpp (built from a fetched copy)}"
: "${LLAMA_CPP_DIR:?set LLAMA_CPP_DIR to the fetched llama.cpp folder (gguf-py is read from it)}"
BIN=${GENPARITY_BIN:-build/genparity}
SHAPES=${SHAPES:-"qwen3-0.6b llama3.2-1b"}
ROUNDS=${ROUNDS:-3}; REPS=${REPS:-3}; P=${P:-512}; N=${N:-128}; THREADS=${THREADS:-2}
DEVICE=${DEVICE:-cpu}
DEPTH=${DEPTH:-0}
DARG=""
[ "$DEPTH" -gt 0 ] && DARG="-d $DEPTH"
if [ "$DEPTH" -gt 0 ] && [ -n "${TRANSFORMERS:-}" ]; then
    echo "compare.sh: DEPTH and TRANSFORMERS together are not supported" >&2
    exit 2
fi
GDEV=""; LDEV=""
[ "$DEVICE" = cuda ] && GDEV="--device cuda --bandwidth-mib 0" && LDEV="-ngl 99"
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
DIR=build/bench-models
OUT=build/compare
mkdir -p "$DIR" "$OUT"
rm -f "$OUT"/*.json

for shape in $SHAPES; do
    m="$DIR/$shape-bf16"
    [ -f "$m/model.safetensors" ] || "$BIN" make-model --shape "$shape" --dtype bf16 -o "$m" >&2
    [ -f "$m.gguf" ] || "$PY" tools/gguf_from_safetensors.py --llama-cpp "$LLAMA_CPP_DIR" "$m" "$m.gguf"
    for q in ${QUANTS:-}; do
        [ -f "$m-$q.gguf" ] || "${LLAMA_QUANTIZE:?set LLAMA_QUANTIZE for QUANTS}" "$m.gguf" "$m-$q.gguf" "$q" >&2
    done
    for q in ${GQUANTS:-}; do
        [ -f "$DIR/$shape-mlx-$q/config.json" ] || "$PY" -c "import sys, mlx.core as mx; mx.set_default_device(mx.cpu)
from mlx_lm import convert
convert(sys.argv[1], mlx_path=sys.argv[2], quantize=True, q_bits=int(sys.argv[3]), q_group_size=int(sys.argv[4]))" \
            "$m" "$DIR/$shape-mlx-$q" "${q#q}" "${GROUP:-64}" >&2
    done
done

r=1
while [ "$r" -le "$ROUNDS" ]; do
    for shape in $SHAPES; do
        m="$DIR/$shape-bf16"
        load0=$(cut -d' ' -f1 /proc/loadavg)
        # shellcheck disable=SC2086
        "$BIN" bench --model "$m" -p "$P" -n "$N" $DARG -r "$REPS" --threads "$THREADS" --format json $GDEV \
            ${GENPARITY_ARGS:-} > "$OUT/r$r-$shape-genparity.json"
        if [ -n "${GBF16:-}" ]; then
            # shellcheck disable=SC2086
            "$BIN" bench --model "$m" -p "$P" -n "$N" $DARG -r "$REPS" --threads "$THREADS" --format json $GDEV \
                --compute bf16 ${GENPARITY_ARGS:-} > "$OUT/r$r-$shape-gpbf16.json"
        fi
        # shellcheck disable=SC2086
        "$LLAMA_BENCH" -m "$m.gguf" -p "$P" -n "$N" $DARG -r "$REPS" -t "$THREADS" $LDEV ${LLAMA_ARGS:-} -o json \
            > "$OUT/r$r-$shape-llama.json"
        if [ -n "${TRANSFORMERS:-}" ]; then
            "$PY" tools/bench_transformers.py "$m" -p "$P" -n "$N" -r "$REPS" > "$OUT/r$r-$shape-hf.json"
        fi
        for q in ${GQUANTS:-}; do
            # shellcheck disable=SC2086
            "$BIN" bench --model "$DIR/$shape-mlx-$q" -p "$P" -n "$N" $DARG -r "$REPS" --threads "$THREADS" \
                --format json ${GENPARITY_ARGS:-} > "$OUT/r$r-$shape-gpq-$q.json"
        done
        for q in ${QUANTS:-}; do
            # shellcheck disable=SC2086
            "$LLAMA_BENCH" -m "$m-$q.gguf" -p "$P" -n "$N" $DARG -r "$REPS" -t "$THREADS" $LDEV ${LLAMA_ARGS:-} \
                -o json > "$OUT/r$r-$shape-llama-$q.json"
        done
        echo "$r $shape $load0 $(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/loads.txt"
    done
    r=$((r + 1))
done

GCMD="$BIN bench --model M -p $P -n $N $DARG -r $REPS --threads $THREADS --format json $GDEV ${GENPARITY_ARGS:-}"
LCMD="$LLAMA_BENCH -m M.gguf -p $P -n $N $DARG -r $REPS -t $THREADS $LDEV ${LLAMA_ARGS:-} -o json"
"$PY" - "$OUT" "$GCMD" "$LCMD" <<'EOF' | tee build/compare.md
import json, os, statistics, sys, time
out, gcmd, lcmd = sys.argv[1:4]
loads = {}
for line in open(os.path.join(out, "loads.txt")):
    r, shape, a, b = line.split()
    loads[(r, shape)] = (a, b)
os.remove(os.path.join(out, "loads.txt"))
rows, med = [], {}
for (r, shape), (a, b) in sorted(loads.items()):
    g = json.load(open(os.path.join(out, "r%s-%s-genparity.json" % (r, shape))))["models"][0]
    entries = [("genparity (f32 compute, bf16 weights)", g["pp_tokens_per_s"], g["tg_tokens_per_s"])]
    extra = os.path.join(out, "r%s-%s-gpbf16.json" % (r, shape))
    if os.path.exists(extra):
        q = json.load(open(extra))["models"][0]
        entries.append(("genparity (bf16 compute)", q["pp_tokens_per_s"], q["tg_tokens_per_s"]))
    extra = os.path.join(out, "r%s-%s-hf.json" % (r, shape))
    if os.path.exists(extra):
        q = json.load(open(extra))
        entries.append((q["engine"], q["pp_tokens_per_s"], q["tg_tokens_per_s"]))
    for fn in sorted(os.listdir(out)):
        pre = "r%s-%s-gpq-" % (r, shape)
        if fn.startswith(pre):
            q = json.load(open(os.path.join(out, fn)))["models"][0]
            entries.append(("genparity mlx %s (g%s)" % (fn[len(pre):-5], os.environ.get("GROUP", "64")),
                            q["pp_tokens_per_s"], q["tg_tokens_per_s"]))
    for fn in sorted(os.listdir(out)):
        pre = "r%s-%s-llama" % (r, shape)
        if fn.startswith(pre):
            kind = fn[len(pre):-5].lstrip("-") or "bf16"
            js = json.load(open(os.path.join(out, fn)))
            pp = next(x["avg_ts"] for x in js if x["n_prompt"] > 0 and x["n_gen"] == 0)
            tg = next(x["avg_ts"] for x in js if x["n_gen"] > 0 and x["n_prompt"] == 0)
            entries.append(("llama.cpp " + kind, pp, tg))
    for name, pp, tg in entries:
        rows.append("| %s | %s | %s → %s | %s | %.1f | %.2f |" % (r, shape, a, b, name, pp, tg))
        med.setdefault((shape, name), []).append((pp, tg))
print("# genparity vs llama.cpp, same run — %s UTC, %d CPUs" % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), os.cpu_count()))
print("\ngenparity: `%s`  \nllama.cpp: `%s`\n" % (gcmd, lcmd))
print("| round | shape | load before → after | engine | pp t/s | tg t/s |\n|---|---|---|---|---|---|")
print("\n".join(rows))
print("\n| shape | engine | median pp t/s | median tg t/s | pp ratio genparity/this | tg ratio genparity/this |")
print("|---|---|---|---|---|---|")
for (shape, name), v in med.items():
    pp = statistics.median(x[0] for x in v); tg = statistics.median(x[1] for x in v)
    gp = med[(shape, "genparity (f32 compute, bf16 weights)")]
    gpp = statistics.median(x[0] for x in gp); gtg = statistics.median(x[1] for x in gp)
    print("| %s | %s | %.1f | %.2f | %.2f× | %.2f× |" % (shape, name, pp, tg, gpp / pp, gtg / tg))
# each genparity row against the llama.cpp row of the same weights: bf16 (either compute mode), or qN_0 for mlx qN
same = ("genparity (f32 compute, bf16 weights)", "genparity (bf16 compute)")
pairs = [((s_, n), (s_, "llama.cpp bf16")) for (s_, n) in med if n in same]
pairs += [((s_, n), (s_, "llama.cpp %s_0" % n.split()[2])) for (s_, n) in med if n.startswith("genparity mlx q")]
pairs = [(a, b) for (a, b) in pairs if b in med]
if pairs:
    print("\n| shape | genparity | llama.cpp | pp ratio | tg ratio |\n|---|---|---|---|---|")
for (shape, name), other in pairs:
    a, b = med[(shape, name)], med[other]
    f = lambda v, i: statistics.median(x[i] for x in v)
    print("| %s | %s | %s | %.2f× | %.2f× |" % (shape, name, other[1], f(a, 0) / f(b, 0), f(a, 1) / f(b, 1)))
EOF
