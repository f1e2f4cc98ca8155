# Two commands set everything up: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The CPU build of torch lies on disk here; a plain `torch` would pull a 5 GB CUDA build.
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install test demo lint bench clean screenshots

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[test,demo]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 3

demo: $(STAMP)
	$(BIN)/gkdtop demo

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python bench/run.py

screenshots: $(STAMP)
	$(BIN)/python -m tests.screenshots screenshots

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
