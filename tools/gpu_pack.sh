#!/bin/sh
# tools/gpu_pack.sh — packs what a run on the GPU machine needs into .gpu/ (ignored by git: add "/.gpu/" to
# .git/info/exclude, then name .gpu in the device tool's carry): the `make cuda` binaries (stripped), the shared
# libraries they link (in case that machine lacks them), and a subset of ../shared/fixtures that fits the carry limit
# (NO_TOKENIZERS=1 leaves the models' tokenizer.json out: most tests feed token ids, but the CLI suites need them;
# with them the four tiny models and both mode references pack into about 39 MB).  tools/gpu_run.sh unpacks
# (Python's lzma: that machine has no zstd) and runs them there.
#   sh tools/gpu_pack.sh [MODEL ...]        default models: tiny-qwen3 tiny-llama tiny-gemma3 tiny-gemma2
#   MODES="cuda_f32_sdpa cuda_bf16_sdpa"    which references/modes files to include (default: cuda_f32_sdpa)
#   OLD=path/to/genparity                   also pack a baseline binary as .gpu/bin/genparity-old (A/B timings)
#   NO_FIXTURES=1                           binaries only (a timing run);  OUTF=FILE  another archive name
#   EXTRA_BINS="path:name ..."              more binaries (variants for an A/B) as .gpu/bin/name
#   BINS="genparity"                        which build-cuda binaries (default genparity run_tests; "" for none)
set -eu
cd "$(dirname "$0")/.."
FX=${GENPARITY_FIXTURES:-../shared/fixtures}
MODELS=${*:-tiny-qwen3 tiny-llama tiny-gemma3 tiny-gemma2}
MODES=${MODES:-cuda_f32_sdpa}
rm -rf .gpu/stage && mkdir -p .gpu/stage/bin .gpu/stage/lib .gpu/stage/fx/models .gpu/stage/fx/references/modes
for b in ${BINS-genparity run_tests}; do strip -o .gpu/stage/bin/$b build-cuda/$b; done
[ -n "${OLD:-}" ] && strip -o .gpu/stage/bin/genparity-old "$OLD"
for e in ${EXTRA_BINS:-}; do strip -o ".gpu/stage/bin/${e#*:}" "${e%%:*}"; done
for l in $(ldd build-cuda/genparity | awk '/=>/ {print $3}' | grep -v -e 'libc\.so' -e 'libm\.so' -e 'libstdc' \
           -e 'libgcc_s' -e 'libgomp'); do cp -L "$l" .gpu/stage/lib/; done
[ -n "${NO_FIXTURES:-}" ] && MODELS= && MODES=
for m in $MODELS; do
    mkdir -p .gpu/stage/fx/models/$m
    (cd "$FX/models/$m" && tar cf - ${NO_TOKENIZERS:+--exclude=tokenizer.json} .) | (cd .gpu/stage/fx/models/$m && tar xf -)
done
[ -n "$MODELS" ] && cp "$FX"/references/*.json .gpu/stage/fx/references/
for md in $MODES; do cp "$FX/references/modes/$md.safetensors" .gpu/stage/fx/references/modes/; done
OUTF=${OUTF:-.gpu/pack.tar.xz}
rm -f "$OUTF"
(cd .gpu/stage && tar cf - .) | xz -9 -T0 > "$OUTF"
rm -rf .gpu/stage
ls -l "$OUTF"
