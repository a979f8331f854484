# Entry points for people and CI: `make test` installs missing packages, builds and runs every test.
# Variables: WERROR=ON|OFF, BUILD_TYPE, BUILD_DIR, JOBS, ARGS (for demo), CTEST_ARGS (for
# test-plain), SANITIZE (address,undefined or thread: builds in build-<sanitizers>/),
# CTEST_SKIP (labels test-plain leaves out: -LE slow; CTEST_SKIP= runs them too),
# SANITIZE_CTEST_ARGS (which tests test-sanitize runs),
# FUZZ_SECONDS (per target, for fuzz).

WERROR     ?= ON
BUILD_TYPE ?= RelWithDebInfo
SANITIZE   ?=
ifeq ($(SANITIZE),)
BUILD_DIR  ?= build
else
BUILD_DIR  ?= build-$(subst $(comma),-,$(SANITIZE))
endif
comma := ,
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 300
CTEST_SKIP ?= -LE slow

SOURCE_DIRS  := src include apps tests
FORMAT_FILES  = $(shell find $(SOURCE_DIRS) -type f \( -name '*.cpp' -o -name '*.hpp' \) 2>/dev/null)
TIDY_FILES    = $(shell find src -type f -name '*.cpp' 2>/dev/null)
RUN_CLANG_TIDY := $(shell command -v run-clang-tidy 2>/dev/null)

.PHONY: all deps build demo bench test test-plain test-sanitize fuzz format format-check tidy clean

all: build

deps:
	./scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DOUTBOX_WERROR=$(WERROR) \
	  -DOUTBOX_SANITIZE=$(SANITIZE)
	cmake --build $(BUILD_DIR) -j$(JOBS)

demo: build
	./$(BUILD_DIR)/outbox demo $(ARGS)

# The benchmark on embedded defaults (about 10 minutes); ARGS="--events 100000 --seconds 3" for a
# quick look. Results, plots and relay logs land in bench-results/.
bench: build
	./$(BUILD_DIR)/outbox bench $(ARGS)

# The tests start their own embedded PostgreSQL and Kafka mock; nothing else needs to run.
# `make test` (what CI runs): the gtest tests under ASan/UBSan in build-address-undefined/, the
# crash campaign, fuzzers and command-line tests on the plain build, side by side
# (scripts/test.sh says why). The fuzz tests (label fuzz, 20 s per target) build tests/fuzz with
# clang++ in $(BUILD_DIR)/fuzz. Tests labelled slow are left out.
SANITIZE_DIR := build-address-undefined
test:
	BUILD_DIR=$(BUILD_DIR) SANITIZE_DIR=$(SANITIZE_DIR) BUILD_TYPE=$(BUILD_TYPE) WERROR=$(WERROR) \
	  JOBS=$(JOBS) ./scripts/test.sh

# Every test on one build ($(BUILD_DIR); SANITIZE=address,undefined or thread builds in
# build-<sanitizers>/ instead), CTEST_ARGS selecting: `make test-plain CTEST_ARGS="-R Relay"`.
test-plain: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 600 -j2 $(CTEST_SKIP) $(CTEST_ARGS)

# Only the sanitized half of `make test`: the unit and gtest integration tests built with ASan and
# UBSan (-O1 -g1) in build-address-undefined/.
SANITIZE_CTEST_ARGS ?= -L 'unit|integration' -LE 'cli|slow'
test-sanitize: deps
	cmake -S . -B $(SANITIZE_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DOUTBOX_WERROR=$(WERROR) \
	  -DOUTBOX_SANITIZE=address,undefined
	cmake --build $(SANITIZE_DIR) -j$(JOBS) --target outbox_unit_tests outbox_integration_tests
	cd $(SANITIZE_DIR) && ctest --output-on-failure --timeout 600 -j2 $(SANITIZE_CTEST_ARGS)

# Every fuzz target for FUZZ_SECONDS each (default 300), with its figures; the corpus grows in
# $(BUILD_DIR)/fuzz/corpus, crashes land in $(BUILD_DIR)/fuzz/artifacts.
fuzz: deps
	cmake -S tests/fuzz -B $(BUILD_DIR)/fuzz -DCMAKE_CXX_COMPILER=clang++ \
	  -DOUTBOX_FUZZ_SECONDS=$(FUZZ_SECONDS)
	cmake --build $(BUILD_DIR)/fuzz -j$(JOBS)
	cd $(BUILD_DIR)/fuzz && ctest -L fuzz --output-on-failure -V

format:
	clang-format -i $(FORMAT_FILES)

format-check:
	clang-format --dry-run -Werror $(FORMAT_FILES)

# Needs compile_commands.json, which the build writes (CMAKE_EXPORT_COMPILE_COMMANDS).
tidy: build
ifneq ($(RUN_CLANG_TIDY),)
	$(RUN_CLANG_TIDY) -p $(BUILD_DIR) -quiet -j$(JOBS) '$(CURDIR)/src/.*\.cpp$$'
else
	clang-tidy -p $(BUILD_DIR) --quiet $(TIDY_FILES)
endif

clean:
	rm -rf $(BUILD_DIR)
