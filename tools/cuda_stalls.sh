#!/bin/sh
# tools/cuda_stalls.sh — on the GPU machine (after tools/gpu_run.sh has unpacked /tmp/gp, or with PACK naming a
# tools/gpu_pack.sh archive): where decode kernels stall, from Nsight Compute's warp-state sampling of `genparity
# bench --device cuda` on a Llama-3.2-1B-shaped model (made there as tools/cuda_profile.sh makes it), kernel by kernel
# and launched one by one (GENPARITY_CUDA_GRAPH=0: ncu serializes kernels anyway).  Each argument is
# "REGEX SKIP COUNT COMPUTE", e.g. the default
#   sh tools/cuda_stalls.sh "matmul_kernel 64 2 f32" "matmul_glu 32 1 f32" "attn_split 40 1 f32" \
#       "mma_decode_kernel 60 2 bf16"
# profiles COUNT launches of the kernels whose name matches REGEX after skipping SKIP of them (P=512 N=0: in a
# 512-token prefill instead of decode), and prints per launch: time, DRAM throughput, occupancy, the stall reasons'
# shares and the 8 SASS instructions with the most samples (the instruction a warp waits at follows the load it
# waits for).  Found this way (BENCHMARKS.md, sixth session): the bf16 decode kernel waiting on its input's loads,
# decode attention waiting on instruction fetch.
G=/tmp/gp
PACK=${PACK:-.gpu/pack.tar.xz}
[ -x $G/bin/genparity ] || { mkdir -p $G &&
    python3 -c "import tarfile, sys; tarfile.open(sys.argv[2]).extractall(sys.argv[1])" $G "$PACK"; }
ldd $G/bin/genparity | grep -q "not found" && export LD_LIBRARY_PATH=$G/lib
M=/tmp/m-${SHAPE:-llama3.2-1b}
[ -d $M ] || $G/bin/genparity make-model --shape ${SHAPE:-llama3.2-1b} --dtype bf16 -o $M >/dev/null 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
[ $# -gt 0 ] || set -- "matmul_kernel 64 2 f32" "matmul_glu 32 1 f32" "attn_split 40 1 f32" \
    "mma_decode_kernel 60 2 bf16"
export GENPARITY_CUDA_GRAPH=0
i=0
for spec in "$@"; do
    i=$((i + 1))
    set -- $spec
    rep=${OUT:-/tmp}/stalls$i
    timeout 200 "$NCU" --section SpeedOfLight --section Occupancy --section WarpStateStats --section SourceCounters \
        --cache-control none --clock-control none -k "regex:$1" --launch-skip "$2" --launch-count "$3" \
        -f -o "$rep" $G/bin/${BIN:-genparity} bench -m $M --device cuda -r 1 -p ${P:-0} -n ${N:-8} --bandwidth-mib 0 \
        --compute "$4" >/dev/null 2>&1
    echo "=== $spec"
    "$NCU" -i "$rep.ncu-rep" --page details 2>&1 |
        grep -E "^  [a-z_ ]*[a-z_]+<|Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy" | cut -c1-150
    "$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep-sass.csv" 2>&1
    python3 - "$rep-sass.csv" "$3" <<'PY'
import csv, sys
blocks, cur = [], None
for r in csv.reader(open(sys.argv[1])):
    if r and r[0] == "Kernel Name":
        cur = []
        blocks.append((r[1], cur))
    elif cur is not None:
        cur.append(r)
for name, b in blocks[: int(sys.argv[2])]:
    h, data = b[0], [r for r in b[1:] if len(r) == len(b[0])]
    si = h.index("Warp Stall Sampling (All Samples)")
    cols = [c for c in h if c.startswith("stall_") and "Not Issued" not in c]
    tot = sum(float(r[si]) for r in data) or 1.0
    share = {c: sum(float(r[h.index(c)]) for r in data) / tot * 100 for c in cols}
    print(f"-- {name[:90]}: {tot:.0f} samples, {len(data)} instructions")
    print("   " + ", ".join(f"{c[6:]} {v:.1f}%" for c, v in sorted(share.items(), key=lambda x: -x[1])[:7] if v > 0))
    for k in sorted(sorted(range(len(data)), key=lambda k: -float(data[k][si]))[:8]):
        r = data[k]
        why = max(cols, key=lambda c: float(r[h.index(c)]))[6:]
        print(f"   {k:5d} {float(r[si]) / tot * 100:5.1f}% {why:14s} {r[1].strip()[:70]}")
PY
done
