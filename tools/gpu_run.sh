#!/bin/sh
# tools/gpu_run.sh — on the GPU machine, from the repository root with .gpu/pack.tar.xz carried (tools/gpu_pack.sh):
# unpacks to /tmp/gp, then runs what the arguments name, printing each step's time:
#   tests      the CUDA tests (run_tests cuda backend_ops), then the cache, steering, LoRA, batch, KV-quantization and
#              generation suites again with GENPARITY_TEST_DEVICE=cuda
#   T=pattern  only those tests
#   bench      genparity bench on Llama-3.2-1B and Qwen3-0.6B shapes (made there by make-model), new build (f32 and
#              bf16 compute) and, when packed, an old one (with and without its CUDA graph: builds before 2026-11-25
#              read GENPARITY_CUDA_NO_GRAPH), alternating for ROUNDS rounds
set -u
G=/tmp/gp
PACK=${PACK:-.gpu/pack.tar.xz}
mkdir -p $G && python3 -c "import tarfile, sys; tarfile.open(sys.argv[2]).extractall(sys.argv[1])" $G $PACK
if ldd $G/bin/genparity | grep -q "not found"; then export LD_LIBRARY_PATH=$G/lib; echo "using the carried libraries"; fi
export GENPARITY_FIXTURES=$G/fx GENPARITY_BIN=$G/bin/genparity
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for what in "$@"; do
    t0=$(date +%s)
    case $what in
    tests)
        $G/bin/run_tests cuda backend_ops
        GENPARITY_TEST_DEVICE=cuda $G/bin/run_tests steer lora batch cache kv_quant generate_parity model_parity beam ;;
    T=*)
        GENPARITY_TEST_DEVICE=${DEV:-} $G/bin/run_tests ${what#T=} ;;
    bench)
        for s in llama3.2-1b qwen3-0.6b; do
            [ -d /tmp/m-$s ] || $G/bin/genparity make-model --shape $s --dtype bf16 -o /tmp/m-$s >/dev/null
        done
        for r in $(seq 1 ${ROUNDS:-2}); do
            for s in llama3.2-1b qwen3-0.6b; do
                B="bench --device cuda -m /tmp/m-$s -p 512 -n 128 -r 3 --bandwidth-mib 0"
                [ -x $G/bin/genparity-old ] && echo "round $r $s old f32" && $G/bin/genparity-old $B | tail -n 3
                [ -x $G/bin/genparity-old ] && echo "round $r $s old f32 no graph" && \
                    GENPARITY_CUDA_NO_GRAPH=1 $G/bin/genparity-old $B | tail -n 3
                echo "round $r $s new f32" && $G/bin/genparity $B | tail -n 3
                echo "round $r $s new bf16" && $G/bin/genparity $B --compute bf16 | tail -n 3
            done
        done ;;
    esac
    echo "== $what: $(( $(date +%s) - t0 )) s"
done
