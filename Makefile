# The README's two commands.
#   make serve — set up a fresh machine, build, and serve the default model
#                (OpenAI-compatible API; prints the URL and a curl example)
#   make test  — build and run every test
# Also: make run PROMPT="..." (one-shot generation in the terminal).
PRESET ?= cpu
BUILD := build/$(PRESET)
PROMPT ?= Write a haiku about bread.

.PHONY: setup configure build build-brioche build-cuda serve run test fuzz clean

setup:
	scripts/setup.sh

configure:
	@test -f $(BUILD)/build.ninja || cmake --preset $(PRESET) >/dev/null

# Everything: the program, every test and benchmark.
build: configure
	cmake --build $(BUILD)

# Only the program: what `make serve` and `make run` need on a fresh machine.
build-brioche: configure
	@echo "make: building build/$(PRESET)/brioche (the tests and benchmarks are built by 'make test')"
	cmake --build $(BUILD) --target brioche

# The CUDA backend (sm_90a); compiles and links without a GPU.
build-cuda:
	@test -f build/cuda/build.ninja || cmake --preset cuda >/dev/null
	cmake --build build/cuda

serve: setup build-brioche
	$(BUILD)/brioche serve

run: setup build-brioche
	$(BUILD)/brioche run -p "$(PROMPT)"

test: setup build
	ctest --test-dir $(BUILD) --output-on-failure -j2

# libFuzzer targets (clang), each run for FUZZ_SECONDS over its corpus.
FUZZ_SECONDS ?= 60
fuzz:
	scripts/fuzz.sh $(FUZZ_SECONDS)

clean:
	rm -rf build
