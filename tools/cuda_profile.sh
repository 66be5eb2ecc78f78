#!/bin/sh
# tools/cuda_profile.sh — on the GPU machine (after tools/gpu_run.sh has unpacked /tmp/gp, or with PACK naming a
# tools/gpu_pack.sh archive): Nsight Compute's kernel times of `genparity bench --device cuda` on a Llama-3.2-1B-shaped
# model (made there as tools/gpu_run.sh makes it), summed per kernel.  Each argument is "SKIP COMPUTE BENCH-FLAGS",
# e.g. the default
#   sh tools/cuda_profile.sh "450 bf16 -p 0 -n 6" "450 f32 -p 0 -n 6" "0 bf16 -p 512 -n 0"
# profiles 220 kernels after skipping SKIP (decode of bf16 and f32 compute, then a bf16 512-token prefill).  The
# times are ncu's (its own clock control, caches flushed before each kernel), so compare them with each other, not
# with `bench`; NCU_FLAGS="--cache-control none --clock-control none" measures warm caches at the GPU's own clocks.
# BIN names another binary of the pack (an A/B); SHAPE another make-model shape (default llama3.2-1b).
G=/tmp/gp
PACK=${PACK:-.gpu/pack.tar.xz}
[ -x $G/bin/genparity ] || { mkdir -p $G && python3 -c "import tarfile, sys; tarfile.open(sys.argv[2]).extractall(sys.argv[1])" $G "$PACK"; }
ldd $G/bin/genparity | grep -q "not found" && export LD_LIBRARY_PATH=$G/lib
M=/tmp/m-${SHAPE:-llama3.2-1b}
[ -d $M ] || $G/bin/genparity make-model --shape ${SHAPE:-llama3.2-1b} --dtype bf16 -o $M >/dev/null 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
[ $# -gt 0 ] || set -- "450 bf16 -p 0 -n 6" "450 f32 -p 0 -n 6" "0 bf16 -p 512 -n 0"
i=0
for mode in "$@"; do
    i=$((i + 1))
    set -- $mode
    skip=$1 compute=$2
    shift 2
    csv=${OUT:-/tmp}/prof$i.csv
    timeout 200 "$NCU" ${NCU_FLAGS:-} --metrics gpu__time_duration.sum --launch-skip "$skip" --launch-count 220 --csv \
        $G/bin/${BIN:-genparity} bench -m $M --device cuda -r 1 --bandwidth-mib 0 --compute "$compute" "$@" > "$csv" 2>&1
    echo "=== skip $skip, compute $compute, $*"
    python3 - "$csv" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print(open(sys.argv[1]).read()[-2000:])
    sys.exit()
h = rows[0]
ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "ns": 1e-3, "us": 1.0, "ms": 1e3}
tot, cnt = collections.defaultdict(float), collections.Counter()
for r in rows[1:]:
    name = r[ki].split("(")[0][:60]
    tot[name] += float(r[vi].replace(",", "")) * scale.get(r[ui], 1.0)
    cnt[name] += 1
for k, v in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"{v:10.1f} us {cnt[k]:4d}x {v / cnt[k]:8.2f} us  {k}")
print(f"total {sum(tot.values()):.1f} us over {sum(cnt.values())} kernels")
PY
done
