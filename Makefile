# EdgeKernelBench: `make demo` (main job on built-in defaults) and `make test` on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test lint bench clean toolchains browser perf

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/ekb demo --out runs/demo

# Cross toolchains + qemu-user for the emulated profiles (rpi4, rpi5, jetson-orin-cpu, armv7, riscv64-rvv).
CROSS_TOOLS := aarch64-linux-gnu-gcc arm-linux-gnueabihf-gcc riscv64-linux-gnu-gcc qemu-aarch64 qemu-arm qemu-riscv64
CROSS_PKGS  := gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf gcc-riscv64-linux-gnu libc6-dev-arm64-cross \
               libc6-dev-armhf-cross libc6-dev-riscv64-cross qemu-user
toolchains:
	@missing=$$(for t in $(CROSS_TOOLS); do command -v $$t >/dev/null || echo $$t; done); \
	if [ -z "$$missing" ]; then echo "toolchains: all present"; \
	else echo "toolchains: installing $(CROSS_PKGS) (missing: $$missing)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(CROSS_PKGS); fi

# Headless Chromium for the HTML report's test (tests/test_report_html.py opens the page in it).
browser:
	@if command -v chromium >/dev/null; then echo "browser: chromium present"; \
	else echo "browser: installing chromium"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; fi

# Linux perf for the sampled kernel profiles (benchmarks/kernel_profile.py --samples and its test).
perf:
	@if command -v perf >/dev/null; then echo "perf: present"; \
	else echo "perf: installing linux-perf"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends linux-perf; fi

# As root (CI), `make test` installs the cross toolchains, Chromium and perf first so those tests run.
TEST_DEPS := $(STAMP) $(if $(filter 0,$(shell id -u)),toolchains browser perf)
test: $(TEST_DEPS)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# lint-imports: the import contracts of pyproject.toml ([tool.importlinter]; docs/architecture.md)
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python benchmarks/harness_overhead.py

clean:
	rm -rf $(VENV) runs build *.egg-info
