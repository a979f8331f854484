# Entry points for people and CI: `make test` installs missing packages, builds and runs every test.
# Variables: WERROR=ON|OFF, BUILD_TYPE, BUILD_DIR, JOBS, ARGS (for demo), CTEST_ARGS (for
# test-plain), SANITIZE (address,undefined or thread: builds in build-<sanitizers>/),
# CTEST_SKIP (labels test-plain leaves out: -LE slow; CTEST_SKIP= runs them too),
# SANITIZE_CTEST_ARGS (which tests test-sanitize runs), TSAN_CTEST_ARGS (test-tsan's),
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

.PHONY: all deps build install package demo bench test test-plain test-sanitize test-tsan fuzz format format-check check-structure tidy clean

all: build

deps:
	./scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DOUTBOX_WERROR=$(WERROR) \
	  -DOUTBOX_SANITIZE=$(SANITIZE) -DOUTBOX_LINE_TABLES_ONLY=OFF
	cmake --build $(BUILD_DIR) -j$(JOBS)

# `make install PREFIX=/opt/outbox`: the operator's program, libraries, headers, CMake package,
# systemd units (ExecStart at PREFIX) and docs. Default PREFIX /usr/local.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# `make package`: $(BUILD_DIR)/outbox_<version>_<arch>.deb (CPack), installed with
# `apt install ./$(BUILD_DIR)/outbox_*.deb`.
package: build
	cd $(BUILD_DIR) && cpack -G DEB

demo: build
	./$(BUILD_DIR)/outbox-dev demo $(ARGS)

# The benchmark on embedded defaults (about 10 minutes); ARGS="--events 100000 --seconds 3" for a
# quick look. Results, plots and relay logs land in bench-results/.
bench: build
	./$(BUILD_DIR)/outbox-dev bench $(ARGS)

# The tests start their own embedded PostgreSQL and Kafka mock; nothing else needs to run.
# `make test` (what CI runs): the gtest tests and the fuzzers in build-address-undefined/, the
# crash campaign and command-line tests on the plain build, side by side (scripts/test.sh says
# why). The fuzz tests (label fuzz, 20 s per target) build tests/fuzz with clang++ in
# <tree>/fuzz. Tests labelled slow are left out.
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

# The tests with threads of their own, built with ThreadSanitizer in build-thread/: the unit
# tests, then the relay (takeover and byte budget included), Kafka consumer and inbox tests
# (TSAN_CTEST_ARGS). A data race, a lock-order inversion or a signal-unsafe call fails the test.
# librdkafka's C11 threads and locks reach the runtime through tests/sanitizers/
# tsan_c11_threads.cpp; tests/sanitizers/tsan.supp says what is not checked and why.
# Builds only the two test programs. Measured from a clean build-thread/ on the shared 2-core
# machine (load 4 to 10): 10 to 15 minutes, 9 to 11 CPU minutes; 171 + 51 tests.
TSAN_CTEST_ARGS ?= -L integration -LE cli -R 'Relay|KafkaConsumer|Inbox'
TSAN_DIR := build-thread
test-tsan: deps
	cmake -S . -B $(TSAN_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DOUTBOX_WERROR=$(WERROR) \
	  -DOUTBOX_SANITIZE=thread
	cmake --build $(TSAN_DIR) -j$(JOBS) --target outbox_unit_tests outbox_integration_tests
	cd $(TSAN_DIR) && ctest --output-on-failure --timeout 600 -j2 -L unit
	cd $(TSAN_DIR) && ctest --output-on-failure --timeout 600 -j2 $(TSAN_CTEST_ARGS)

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

# No include cycle between src/'s folders, no file over 500 lines, no function over 60 lines
# (scripts/check-structure.sh).
check-structure:
	./scripts/check-structure.sh

# Needs compile_commands.json, which the build writes (CMAKE_EXPORT_COMPILE_COMMANDS).
tidy: build
ifneq ($(RUN_CLANG_TIDY),)
	$(RUN_CLANG_TIDY) -p $(BUILD_DIR) -quiet -j$(JOBS) '$(CURDIR)/src/.*\.cpp$$'
else
	clang-tidy -p $(BUILD_DIR) --quiet $(TIDY_FILES)
endif

clean:
	rm -rf $(BUILD_DIR)
