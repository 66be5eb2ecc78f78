# genparity — build, test and benchmark.
#   make            build/genparity, build/libgenparity.a, build/libgenparity.so
#   make test       build and run the whole suite (ends with "N passed, N failed, N skipped"), then the Python
#                   tests (python/tests, pytest from .venv; scripts/python-tests.sh)
#   make asan       the unit suite once under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   make bench-tokenizer  tokenizer load time and encode/decode MB/s on the fixture tokenizers
#   make bench-compare    genparity and llama.cpp side by side on the same weights (bench/compare.sh; needs
#                         LLAMA_BENCH and LLAMA_CPP_DIR from a fetched llama.cpp, never committed)
#   make demo       generate Shakespeare-like text from the embedded model
#   make deps       install the Debian packages the build needs (as root), else print the apt-get line
#   make fuzz       build the libFuzzer targets of fuzz/ (clang; ASan + UBSan incl. float-cast-overflow, build-fuzz/)
#                   and run each for FUZZ_SECONDS (default 20) from seeds made by tools/fuzz_seeds.py
#   make tsan       the multi-context and thread-pool tests under ThreadSanitizer (build-tsan/)
#   make cuda       the same library, CLI and tests with the CUDA backend (nvcc, sm_90a: Hopper) in build-cuda/
#   make test-cuda  build-cuda's CUDA tests: on a GPU machine parity, determinism and the op harness (again with the
#                   bf16 GEMM's chains forced into 1, 2 and 4 groups, its whole-GEMM wgmma path forced off and on,
#                   and on with cp.async copies instead of TMA, the bf16 attention's row tiles on 2 and 4 warps,
#                   the one-token projections' looping blocks capped at 3),
#                   then the cache, steering, LoRA, batch, KV-quantization and generation suites again on the GPU
#                   (GENPARITY_TEST_DEVICE=cuda); without a GPU or driver they check that selecting CUDA is a clear
#                   error

BUILD   ?= build
CC      ?= gcc
OPT     ?= -O2
SAN     ?=
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra -Werror -Wno-unused-parameter \
              -fPIC -Iinclude -Isrc -Itests -I/usr/include/cjson $(SAN)
CFLAGS  ?=
ALL_CFLAGS = $(CFLAGS_BASE) $(CFLAGS)
LDLIBS  = -lcjson -lpcre2-8 -lutf8proc -lm -lpthread
SERVER_LDLIBS = -lmicrohttpd
LDFLAGS_ALL = $(SAN) $(LDFLAGS)
# only the CLI's bandwidth probe (cli/cmd_bench.c) uses OpenMP; the library passes thread counts explicitly
OMP     = -fopenmp

LIB_SRC  := $(shell find src -name '*.c' | sort)
# CUDA backend (GP_CUDA=1, set by `make cuda`): src/**/*.cu through nvcc, linked with cudart (static)
NVCC      ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME ?= $(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC) 2>/dev/null)))
CUDA_ARCH ?= -gencode arch=compute_90a,code=sm_90a
NVCCFLAGS = -std=c++17 -O3 $(CUDA_ARCH) -lineinfo -Xcompiler -fPIC,-Wall -Werror all-warnings -Iinclude -Isrc
ifeq ($(GP_CUDA),1)
CU_SRC    := $(shell find src -name '*.cu' | sort)
CFLAGS_BASE += -DGP_CUDA=1
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
endif
CU_OBJ   := $(CU_SRC:%.cu=$(BUILD)/obj/%.cu.o)
CLI_SRC  := $(shell find cli server -name '*.c' | sort)
TEST_SRC := $(shell find tests -name '*.c' | sort)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)
LIB_OBJ  += $(CU_OBJ)
DEPS     := $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d)

.PHONY: all test asan tsan fuzz fuzz-build fuzz-lib demo deps deps-check clean bench bench-compare bench-tokenizer \
        header-check cuda test-cuda nvcc-check

all: $(BUILD)/genparity $(BUILD)/libgenparity.a $(BUILD)/libgenparity.so

# The Debian packages are checked (and installed as root) before anything compiles: every object has the stamp as
# an order-only prerequisite, so `make -j` never races the check against a compiler needing a missing header, and
# a new stamp never makes objects stale.
$(BUILD)/deps.stamp: scripts/install-deps.sh
	@mkdir -p $(BUILD)
	@sh scripts/install-deps.sh --check
	@touch $@

deps-check:
	@sh scripts/install-deps.sh --check

deps:
	@sh scripts/install-deps.sh

$(CLI_OBJ): ALL_CFLAGS += $(OMP)

$(BUILD)/obj/%.o: %.c | $(BUILD)/deps.stamp
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu | nvcc-check
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

nvcc-check:
	@command -v $(NVCC) >/dev/null 2>&1 || { echo "make cuda: nvcc not found (install the CUDA toolkit or set NVCC=/path/to/nvcc)" >&2; exit 1; }

cuda:
	$(MAKE) BUILD=build-cuda GP_CUDA=1 all build-cuda/run_tests

CUDA_SUITES = steer lora batch cache kv_quant generate_parity model_parity beam
test-cuda: cuda
	GENPARITY_BIN=build-cuda/genparity ./build-cuda/run_tests cuda backend_ops
	@if nvidia-smi -L >/dev/null 2>&1; then \
	    for g in 1 2 4; do GP_CU_GEMM_SPLIT=$$g ./build-cuda/run_tests cuda backend_ops || exit 1; done; \
	    for w in 0 1; do GP_CU_WG_WHOLE=$$w ./build-cuda/run_tests cuda backend_ops || exit 1; done; \
	    GP_CU_WG_WHOLE=1 GP_CU_TMA=0 ./build-cuda/run_tests cuda backend_ops || exit 1; \
	    for k in 2 4; do GP_CU_ATTN_K=$$k ./build-cuda/run_tests cuda backend_ops || exit 1; done; \
	    GP_CU_ATTN_PLAIN=0 ./build-cuda/run_tests cuda backend_ops || exit 1; \
	    for e in GP_CU_ATTN_PLAIN=1 GP_CU_ATTN_PLAIN=0 GP_CU_ATTN_DBUF=0; do \
	        env GP_CU_ATTN_LOOP_BLOCKS=3 $$e ./build-cuda/run_tests cuda backend_ops || exit 1; done; \
	    for w in 0 1; do GP_CU_ATTN_WIDE=$$w ./build-cuda/run_tests cuda backend_ops || exit 1; done; \
	    GP_CU_ATTN_PRE=0 ./build-cuda/run_tests cuda backend_ops || exit 1; \
	    GP_CU_ATTN_PER=2 ./build-cuda/run_tests cuda backend_ops || exit 1; \
	    GP_CU_WG_FULL=0 ./build-cuda/run_tests cuda backend_ops || exit 1; \
	    GP_CU_DEC_LOOP_CAP=3 ./build-cuda/run_tests cuda backend_ops || exit 1; \
	    GP_CU_DEC_LOOP_CAP=3 GP_CU_GLU_DYN=0 ./build-cuda/run_tests cuda backend_ops || exit 1; \
	    GENPARITY_TEST_DEVICE=cuda GENPARITY_BIN=build-cuda/genparity ./build-cuda/run_tests $(CUDA_SUITES); \
	    GP_CU_ATTN_LOOP_BLOCKS=1 GENPARITY_TEST_DEVICE=cuda GENPARITY_BIN=build-cuda/genparity \
	        ./build-cuda/run_tests generate_parity bf16_mode invariance cuda_decode_graph; \
	    GP_CU_ATTN_PRE=0 GENPARITY_TEST_DEVICE=cuda GENPARITY_BIN=build-cuda/genparity \
	        ./build-cuda/run_tests bf16_mode invariance cuda_decode_graph; \
	    GP_CU_DEC_LOOP_CAP=3 GENPARITY_TEST_DEVICE=cuda GENPARITY_BIN=build-cuda/genparity \
	        ./build-cuda/run_tests generate_parity bf16_mode invariance cuda_decode_graph batch; \
	else echo "test-cuda: no usable CUDA device: the suites' GPU pass is skipped"; fi

$(BUILD)/libgenparity.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libgenparity.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS_ALL) $(LDLIBS)

$(BUILD)/genparity: $(CLI_OBJ) $(BUILD)/libgenparity.a
	$(CC) -o $@ $(CLI_OBJ) $(BUILD)/libgenparity.a $(OMP) $(LDFLAGS_ALL) $(LDLIBS) $(SERVER_LDLIBS)

$(BUILD)/run_tests: $(TEST_OBJ) $(BUILD)/libgenparity.a
	$(CC) -o $@ $(TEST_OBJ) $(BUILD)/libgenparity.a $(LDFLAGS_ALL) $(LDLIBS)

# The header must compile as C and as C++.
$(BUILD)/header-check.stamp: include/genparity.h | $(BUILD)/deps.stamp
	@mkdir -p $(BUILD)
	echo '#include "genparity.h"' | $(CC) -std=c11 -Wall -Wextra -Werror -Iinclude -x c -fsyntax-only -
	echo '#include "genparity.h"' | g++ -std=c++11 -Wall -Wextra -Werror -Iinclude -x c++ -fsyntax-only -
	@touch $@

test: all $(BUILD)/run_tests $(BUILD)/header-check.stamp
	GENPARITY_BIN=$(BUILD)/genparity ./$(BUILD)/run_tests $(T)
	GENPARITY_BIN=$(BUILD)/genparity sh scripts/python-tests.sh $(T)

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
		build-asan/genparity build-asan/run_tests
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 GENPARITY_BIN=build-asan/genparity GENPARITY_ASAN=1 \
		./build-asan/run_tests $(T)

# ThreadSanitizer: one model shared by 4 threads, each with its own context (outputs equal to single-threaded), and
# the thread pool's exactly-once stress test.  GENPARITY_TSAN raises the stress test's job count.
TSAN_TESTS ?= concurrency
tsan:
	$(MAKE) BUILD=build-tsan OPT=-O1 SAN="-fsanitize=thread -fno-omit-frame-pointer" build-tsan/run_tests
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" GENPARITY_TSAN=1 ./build-tsan/run_tests '$(TSAN_TESTS)'

# libFuzzer targets (fuzz/fuzz_<name>.c), linked against a library built with clang's coverage + sanitizers.
FUZZ_SECONDS ?= 20
FUZZ_CC      ?= clang
FUZZ_SAN      = -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_TARGETS := $(patsubst fuzz/fuzz_%.c,%,$(sort $(wildcard fuzz/fuzz_*.c)))
FUZZ_BINS    := $(FUZZ_TARGETS:%=build-fuzz/fuzz_%)

# The numeric kernels (src/kernels/) are compiled by gcc without instrumentation in the fuzz build: clang 14 does
# not know every __builtin_cpu_supports feature they test; `make asan` covers them.
ifeq ($(FUZZ_LIB),1)
$(BUILD)/obj/src/kernels/%.o: override CC = gcc
$(BUILD)/obj/src/kernels/%.o: override SAN =
endif

fuzz-lib:
	@sh scripts/install-fuzz-deps.sh --check
	$(MAKE) BUILD=build-fuzz FUZZ_LIB=1 CC=$(FUZZ_CC) OPT=-O1 SAN="-fsanitize=fuzzer-no-link $(FUZZ_SAN)" \
		build-fuzz/libgenparity.a

# sources a target needs beyond the library
FUZZ_EXTRA_oai_request = server/oai.c server/slots.c

build-fuzz/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_common.h fuzz-lib
	$(FUZZ_CC) $(CFLAGS_BASE) -O1 -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $< $(FUZZ_EXTRA_$*) build-fuzz/libgenparity.a \
		$(LDLIBS)

fuzz-build: $(FUZZ_BINS)

fuzz: all fuzz-build
	.venv/bin/python tools/fuzz_seeds.py --out build-fuzz/seeds --fixtures $(FIXTURES)
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p build-fuzz/corpus/$$t; \
		echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
		ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 GENPARITY_FIXTURES=$(FIXTURES) \
		./build-fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=60 -rss_limit_mb=4096 \
			-print_final_stats=1 -artifact_prefix=build-fuzz/crash-$$t- \
			build-fuzz/corpus/$$t build-fuzz/seeds/$$t 2>build-fuzz/fuzz_$$t.log \
			|| { tail -60 build-fuzz/fuzz_$$t.log; echo "fuzz_$$t: FAILED (input saved as build-fuzz/crash-$$t-*)"; exit 1; }; \
		grep -E "stat::number_of_executed_units|stat::peak_rss_mb" build-fuzz/fuzz_$$t.log | tr '\n' ' '; echo; \
	done


demo: all
	./$(BUILD)/genparity generate --prompt "ROMEO:" --max-tokens 120

bench: all
	sh bench/run.sh

bench-compare: all
	sh bench/compare.sh

FIXTURES ?= ../shared/fixtures
$(BUILD)/bench_tokenizer: bench/bench_tokenizer.c $(BUILD)/libgenparity.a | $(BUILD)/deps.stamp
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libgenparity.a $(LDFLAGS_ALL) $(LDLIBS)

bench-tokenizer: $(BUILD)/bench_tokenizer
	./$(BUILD)/bench_tokenizer $(FIXTURES)/corpus/tinyshakespeare.txt \
		$(FIXTURES)/tokenizers/llama2/tokenizer.json $(FIXTURES)/tokenizers/llama3/tokenizer.json \
		$(FIXTURES)/tokenizers/qwen3/tokenizer.json

clean:
	rm -rf build build-asan build-tsan build-fuzz build-cuda

-include $(DEPS)
