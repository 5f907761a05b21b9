# The README's two commands.
#   make serve — set up a fresh machine, build, and serve the default model
#                (OpenAI-compatible API; prints the URL and a curl example)
#   make test  — build and run every test
# Also: make run PROMPT="..." (one-shot generation in the terminal).
PRESET ?= cpu
BUILD := build/$(PRESET)
PROMPT ?= Write a haiku about bread.

.PHONY: setup build build-cuda serve run test clean

setup:
	scripts/setup.sh

build:
	@test -f $(BUILD)/build.ninja || cmake --preset $(PRESET) >/dev/null
	cmake --build $(BUILD)

# The CUDA backend (sm_90a); compiles and links without a GPU.
build-cuda:
	@test -f build/cuda/build.ninja || cmake --preset cuda >/dev/null
	cmake --build build/cuda

serve: setup build
	$(BUILD)/brioche serve

run: setup build
	$(BUILD)/brioche run -p "$(PROMPT)"

test: setup build
	ctest --test-dir $(BUILD) --output-on-failure -j2

clean:
	rm -rf build
