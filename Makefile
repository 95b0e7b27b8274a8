# Kernel Lab — `make lab` runs the course (JupyterLab opens START_HERE.md), `make check` says in
# under a minute whether the set-up works, `make test` runs the whole suite.
# Each creates .venv if missing and installs what it needs.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# Pin BLAS/OpenMP/Numba to the 2 cores of the course machines unless the caller says otherwise.
export OMP_NUM_THREADS ?= 2
export OPENBLAS_NUM_THREADS ?= 2
export NUMBA_NUM_THREADS ?= 2
# Idle worker threads of OpenBLAS / OpenMP must not spin and steal the other library's core
# (see kernellab/threads.py).
export OMP_WAIT_POLICY ?= passive
export OPENBLAS_THREAD_TIMEOUT ?= 4
ROOT_FLAG := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
LAB_PORT ?= 8888
# the folder JupyterLab serves (the browser test serves a temporary copy)
LAB_ROOT ?= $(CURDIR)
LAB_ARGS ?=

.PHONY: lab check lint test bench bench-verdicts bench-sim bench-npu gpu-check release install \
	slides book clean

# PyTorch (the torch extra: chapter 9, Lab 9) pinned to the release the course is tested with;
# on the course machines pip takes its CPU build from the local wheel folder (about 190 MB),
# elsewhere PyPI's build for the platform (on Linux x86_64 a CUDA build of several GB).
TORCH_VERSION ?= 2.13.0

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[lab,test,torch,book]' 'torch==$(TORCH_VERSION)'
	@rm -f $(VENV)/.installed-*
	@touch $@

install: $(STAMP)

# JupyterLab opens on START_HERE.md, shown rendered: the course's default viewer for Markdown
# (app-level settings of this .venv only; a user's own settings still win; never rewritten).
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json

$(LAB_SETTINGS): | $(STAMP)
	@mkdir -p $(@D)
	@test -e $@ || printf '%s\n' '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Markdown Preview"}}}' > $@

lab: $(STAMP) $(LAB_SETTINGS)
	$(VENV)/bin/jupyter lab --no-browser --ip=127.0.0.1 --port=$(LAB_PORT) $(ROOT_FLAG) \
	    --ServerApp.root_dir=$(LAB_ROOT) --LabApp.default_url=/lab/tree/START_HERE.md $(LAB_ARGS)

# The smoke run (grader/smoke.py): installed and importable, chapter 1's first cell in a
# Jupyter kernel, one lab's solution graded; one line of verdict, non-zero on failure.
check: $(STAMP)
	@$(PY) -m grader.smoke

# The suite runs on TEST_WORKERS processes (pytest-xdist), one test file per worker at a time
# (--dist loadfile keeps a notebook's cells, and a file's module fixtures, in one process).
TEST_WORKERS ?= 2

# One session for the tests and the notebooks (nbval), so that neither waits for the other's
# last file: the two workers stay busy to the end. --durations lists the 20 slowest tests in
# every run (CI's log too): where the 12-minute budget goes.
# ruff (configured in pyproject.toml): the first step of make test, a few seconds
lint: $(STAMP)
	$(VENV)/bin/ruff check .

# The timed tests (marker ``timed``: the cpu labs' gradings judged by wall-clock ratios) run
# last, in one process with nothing beside it, so that no other test's load slows one side of
# a ratio.
# bubblewrap (Debian's package) puts the grader's worker in an OS sandbox (grader/sandbox.py);
# the test target installs it where it can (root and apt), and says so where it cannot
SANDBOX_TOOL := $(shell command -v bwrap)

# Chromium (Debian's package) for the browser tests (marker ``site``, tests/test_site/): the
# test target installs it the same way, and they are skipped, saying why, where it cannot.
BROWSER := $(or $(KERNELLAB_CHROMIUM),$(shell command -v chromium || \
	command -v chromium-browser || command -v google-chrome))

test: $(STAMP)
	@test -n "$(SANDBOX_TOOL)" || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    apt-get install -y -q bubblewrap >/dev/null 2>&1; } || \
	    echo "bubblewrap not installed: the grader's worker runs with resource limits only"
	@test -n "$(BROWSER)" || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    apt-get install -y -q chromium >/dev/null 2>&1; } || \
	    echo "Chromium not installed: the browser tests are skipped"
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --nbval-lax --nbval-current-env \
	    --durations=20 -p no:cacheprovider -m "not timed and not site" tests solutions chapters
	KERNELLAB_SITE_FROM_CACHE=1 $(PY) -m pytest -q --durations=5 -p no:cacheprovider -m site tests
	$(PY) -m pytest -q --durations=10 -p no:cacheprovider -m timed tests

# The course site: chapters executed through jupyter-cache (.kernellab-cache/book/, keyed by
# their code: after make test, or after one edit, only what changed runs), rendered by Sphinx
# + myst-nb (book/conf.py) into build/book/; open build/book/index.html.
book: $(STAMP)
	$(PY) -m sphinx -b html -q -c book . build/book
	@echo "the site: $(CURDIR)/build/book/index.html"

bench: $(STAMP)
	$(PY) benchmarks/bench_gemm_cpu.py
	$(PY) benchmarks/bench_conv_cpu.py

# each cpu-tier lab's performance phase on its solution (20x) and its too-slow known-wrong
# submissions (5x each), in a row: the margins per rule on both sides of each threshold
bench-verdicts: $(STAMP)
	$(PY) benchmarks/bench_verdicts.py

# the sim tier's executor vs numba-cuda's stock simulator (about 2 minutes on 2 cores)
bench-sim: $(STAMP)
	$(PY) benchmarks/bench_sim.py

# the NPU simulator's speed (recorded instructions/s) and each NPU lab's grading time (goal < 30 s
# on 2 cores)
bench-npu: $(STAMP)
	$(PY) benchmarks/bench_npu.py

release: $(STAMP)
	$(VENV)/bin/kernellab release
	$(VENV)/bin/kernellab coverage --write

# Lecture decks: one reveal.js deck per chapter in build/slides/, with its outputs: the site's
# cached run of the same code (after make test or make book), else the chapter run now (a few
# minutes on 2 cores). The slide breaks are the chapters' own
# metadata (grader/slides.py), which RISE in JupyterLab reads too.
slides: $(STAMP)
	$(PY) -m grader.slides --execute --out build/slides

# The GPU check: run on a machine with an NVIDIA GPU and numpy, numba, numba-cuda, cupy already
# installed (no network): it uses the interpreter it finds and the source tree, installs
# nothing. Every GPU lab's solution graded on the gpu tier, chapter 2's ladder vs cuBLAS, a
# table and benchmarks/results/gpu_check.json, in a few minutes; without a GPU it says so and
# exits 0.
gpu-check:
	PYTHONPATH=$(CURDIR) KERNELLAB_DEVICE=gpu $(PYTHON) benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) .kernellab-cache .pytest_cache build
