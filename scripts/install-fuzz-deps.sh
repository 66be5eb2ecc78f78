#!/bin/sh
# install-fuzz-deps.sh — the Debian packages `make fuzz` needs beyond install-deps.sh: clang (libFuzzer targets),
# libclang-rt-dev (the fuzzer, ASan and UBSan runtimes) and libomp-dev (clang's OpenMP runtime, for -fopenmp).
#   --check : exit quietly when a libFuzzer program links; otherwise install (as root) or print the apt-get line.
PKGS="clang libclang-rt-dev libomp-dev"
probe() {
    d=$(mktemp -d) || return 1
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' > "$d/f.c"
    printf '#include <omp.h>\nint x(void) { return omp_get_max_threads(); }\n' > "$d/o.c"
    clang -fsanitize=fuzzer,address,undefined "$d/f.c" -o "$d/f" >/dev/null 2>&1 &&
        clang -fopenmp -c "$d/o.c" -o "$d/o.o" >/dev/null 2>&1
    rc=$?
    rm -rf "$d"
    return $rc
}
command -v clang >/dev/null 2>&1 && probe && exit 0
if [ "$(id -u)" = 0 ]; then
    echo "install-fuzz-deps: installing $PKGS" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PKGS) >&2 || {
        echo "install-fuzz-deps: apt-get failed; run: apt-get install -y $PKGS" >&2; exit 1; }
    probe || { echo "install-fuzz-deps: clang still cannot link a libFuzzer program" >&2; exit 1; }
else
    echo "install-fuzz-deps: missing packages; run as root: apt-get update && apt-get install -y $PKGS" >&2
    exit 1
fi
