#!/bin/sh
# tools/cuda_sass_wgmma.sh — whether ptxas kept each wgmma GEMM kernel's stage on the uniform datapath.  For every
# wg_gemm_kernel instantiation in an object (default: src/kernels/cuda/cuda_mma.cu compiled here for sm_90a, no GPU
# needed): its HGMMAs, the R2UR moves within 4 instructions before one (a wgmma descriptor computed in vector
# registers, each wgmma then waiting on its move: such builds measured 2-5% slower at pp512, BENCHMARKS.md), the
# mbarrier try-waits addressed by vector registers, the WARPSYNCs and the instructions.  A change to the kernel's
# control flow (a loop around its roles, code after its epilogue) can flip these; check before timing it.
# Needs cuobjdump: the CUDA toolkit's, or the one in PyPI's nvidia-cuda-cuobjdump wheel (its nvidia/cu13/bin).
#   sh tools/cuda_sass_wgmma.sh [OBJ]          CUOBJDUMP=path   NVCC=path
set -eu
cd "$(dirname "$0")/.."
CUOBJDUMP=${CUOBJDUMP:-cuobjdump}
command -v "$CUOBJDUMP" > /dev/null || { echo "cuda_sass_wgmma.sh: no cuobjdump (set CUOBJDUMP)" >&2; exit 1; }
OBJ=${1:-}
if [ -z "$OBJ" ]; then
    OBJ=$(mktemp /tmp/gp-sass.XXXXXX.o)
    trap 'rm -f "$OBJ"' EXIT
    ${NVCC:-nvcc} -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Iinclude -Isrc -c \
        src/kernels/cuda/cuda_mma.cu -o "$OBJ" 2>&1 | grep -v C7519 >&2 || true # (ptxas's notes of injected arrives)
    [ -s "$OBJ" ] || { echo "cuda_sass_wgmma.sh: the compile failed" >&2; exit 1; }
fi
"$CUOBJDUMP" -sass "$OBJ" | python3 -c '
import re, sys
name, body, out = None, [], []
def flush():
    if not name or "wg_gemm_kernel" not in name:
        return
    ins = [re.sub(r"^\s*/\*[0-9a-f]+\*/\s*", "", l.split(";")[0]).strip() for l in body]
    hg = [k for k, l in enumerate(ins) if "HGMMA" in l]
    near = sum(any("R2UR" in ins[j] for j in range(max(0, k - 4), k)) for k in hg)
    tw = sum("TRYWAIT" in l and re.search(r"\[R\d", l) is not None for l in ins)
    ws = sum("WARPSYNC" in l for l in ins)
    m = re.search(r"wg_gemm_kernelILi(\d)ELb(\d)ELb(\d)ELb(\d)E", name)
    tag = "CH %s GLU %s TMA %s FULL %s" % m.groups() if m else name
    out.append("%-30s HGMMA %2d  R2UR before one %d  vector-addressed try-waits %d  WARPSYNC %d  instructions %d"
               % (tag, len(hg), near, tw, ws, len(ins)))
for line in sys.stdin:
    f = re.search(r"Function : (\S+)", line)
    if f:
        flush()
        name, body = f.group(1), []
    elif re.match(r"\s*/\*[0-9a-f]{4}\*/", line):
        body.append(line)
flush()
print("\n".join(sorted(out)))
'
