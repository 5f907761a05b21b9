# The README's two commands.
#   make run   — set up a fresh machine, build, and run the default model
#   make test  — build and run every test
PRESET ?= cpu
BUILD := build/$(PRESET)
PROMPT ?= Write a haiku about bread.

.PHONY: setup build run test clean

setup:
	scripts/setup.sh

build:
	@test -f $(BUILD)/build.ninja || cmake --preset $(PRESET) >/dev/null
	cmake --build $(BUILD)

run: setup build
	$(BUILD)/brioche run -p "$(PROMPT)"

test: setup build
	ctest --test-dir $(BUILD) --output-on-failure -j2

clean:
	rm -rf build
