# Two commands on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: demo test venv clean bench

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch pinned: this version is on local disk here; an unpinned torch may pull a multi-GB CUDA build.
	$(BIN)/python -m pip install -q "torch==2.13.0" "kernels==0.17.2"
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m frt_dist.demo.run

test: $(STAMP)
	$(BIN)/frt lock --check
	$(BIN)/python -m pytest -q -n 2

bench: $(STAMP)
	$(BIN)/python bench/bench_resolve.py

clean:
	rm -rf $(VENV) build dist *.egg-info frt_dist/_bundled
