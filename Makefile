# Two commands do all the set-up: `make demo` and `make test`.
# Each creates .venv when it is missing and installs minidist into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RANKS ?= 4
export OMP_NUM_THREADS := 1
export OPENBLAS_NUM_THREADS := 1
export MKL_NUM_THREADS := 1
# the venv's bin/ must be on PATH: nbgrader calls `alembic`, launch calls `mpiexec`
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: demo test lint lab bench release grade clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip >/dev/null
	$(BIN)/python -m pip install -e ".[mpich,labs,dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m minidist.examples.mlp

test: $(STAMP)
	$(BIN)/python -m ruff check minidist tests
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/python -m ruff check minidist tests

lab: $(STAMP)
	$(BIN)/jupyter lab labs/

release: $(STAMP)
	$(BIN)/python -m minidist.course release

# make grade SUBMISSIONS=path/to/folder   (nbgrader's submitted/ layout or flat <student>_<lab>.ipynb)
grade: $(STAMP)
	$(BIN)/python -m minidist.course grade $(SUBMISSIONS)

bench: $(STAMP)
	$(BIN)/python -m minidist.bench.autograd

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
