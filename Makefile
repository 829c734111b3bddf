# The two commands of the README. Both create .venv when it is missing and install the pinned
# environment (constraints.txt) once; the stamp file makes later calls skip the install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fwbench-installed
CAMPAIGN ?= params/smoke.yaml

.PHONY: run test setup lint lab browser slurm web jemalloc gpu-kit gpu-rehearsal clean-db help

help:
	@echo "make run   set up .venv, run $(CAMPAIGN) and build its report"
	@echo "make test  set up .venv, lint (ruff) and run the test suite (pytest, TEST_WORKERS=2 workers)"
	@echo "make lab   set up .venv and open the notebooks in JupyterLab (fwbench kernel)"
	@echo "make browser  install Debian's Chromium, Firefox ESR and WebKitGTK (root, apt)"
	@echo "make slurm    install Debian's Slurm and munge for tests/test_slurm.py (root, apt)"
	@echo "make jemalloc install Debian's jemalloc, which params/memory_seed.yaml preloads (root, apt)"
	@echo "make web      install onnxruntime-web (npm ci in web/) for 14_web_audio's browser runtimes"
	@echo "make gpu-kit  download the wheels a GPU node without network lacks into gpu/kit/ (see gpu/run.sh)"
	@echo "make gpu-rehearsal  run a GPU lease on this CPU with the GPU image's versions (gpu/rehearse.sh)"

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	$(BIN)/python -m ipykernel install --sys-prefix --name fwbench --display-name "fwbench (.venv)"
	touch $(STAMP)

# onnxruntime-web comes along when npm is there; without it (or without Chromium, which needs
# root: make browser) the smoke campaign's browser rows are skipped with the command to run
run: $(STAMP)
	if command -v npm >/dev/null; then $(MAKE) --no-print-directory web; fi
	$(BIN)/fwbench run $(CAMPAIGN)

lint: $(STAMP)
	$(BIN)/ruff check lib tests notebooks examples
	$(BIN)/ruff format --check lib tests notebooks examples

# --durations: the slowest tests named in every log, since the suite's time budget is watched.
# TEST_WORKERS pytest-xdist workers, each given a whole test file at a time (a file's fixtures
# are built once), in the order tests/conftest.py collects them; TEST_WORKERS=0 runs serially.
# Two, because the serial suite kept about one of two cores busy: much of its time is spent
# starting kernels and subprocesses and importing torch and JAX.
TEST_WORKERS ?= 2
test: lint
	$(BIN)/python -m pytest -q --durations=30 \
		-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# JupyterLab on the project, loopback only (its URL with the token is printed). jupyter_config/ on
# JUPYTER_CONFIG_PATH makes notebooks/*.py open as notebooks with the fwbench kernel, and the
# kernel gets the runner's JAX allocator and profiler log settings (pipeline/trial.py), so its
# records measure what a campaign's do.
# tests/test_lab.py starts the server the same way. Jupyter refuses root unless told; containers
# and CI run as root, and the server only listens on loopback behind a token.
# Extra options: make lab LAB_ARGS="--port 9999 --no-browser"
LAB_ARGS ?=
lab: $(STAMP)
	JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter_config$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	XLA_PYTHON_CLIENT_PREALLOCATE="$${XLA_PYTHON_CLIENT_PREALLOCATE:-false}" \
	KINETO_LOG_LEVEL="$${KINETO_LOG_LEVEL:-6}" \
	$(BIN)/jupyter-lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir="$(CURDIR)" \
	  $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# The browsers tests/test_lab.py and 14_web_audio drive, Debian's (playwright's own downloads
# cannot be used offline): Chromium; Firefox ESR (through Playwright's moz-firefox channel);
# WebKitGTK's MiniBrowser with its WebDriver (through Selenium) on a virtual X display (Xvfb);
# PulseAudio, the sound server Firefox's streaming page plays into (a null sink).
# Needs root; does nothing when they are all installed.
browser:
	test -x /usr/bin/chromium -a -x /usr/bin/firefox-esr -a -x /usr/bin/WebKitWebDriver \
	  -a -x /usr/bin/Xvfb -a -x /usr/bin/pulseaudio || \
	  { DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium firefox-esr \
	    webkit2gtk-driver xvfb xauth pulseaudio; }

# The Slurm clusters the tests start (tests/slurm_cluster.py, one node; tests/slurm_nodes.py, two
# nodes in network namespaces of their own; daemons run by the tests, stopped after): Debian's
# slurmctld, slurmd, the client commands and munge, and iproute2 for the namespaces. Needs root;
# does nothing when they are there.
slurm:
	test -x /usr/sbin/slurmctld -a -x /usr/sbin/slurmd -a -x /usr/bin/sbatch -a -x /usr/sbin/munged \
	  -a -x /usr/sbin/ip -a -x /usr/bin/nsenter || \
	  { DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmctld slurmd slurm-client munge \
	    iproute2 util-linux; }

# jemalloc, preloaded into the memory family's seed-scale kernels (params/memory_seed.yaml): it keeps
# freed pages, so a step does not pay page faults that depend on what the process freed before.
# Needs root; does nothing when the linker already finds it.
jemalloc:
	/sbin/ldconfig -p | grep -q 'libjemalloc.so.2 ' || \
	  { DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q libjemalloc2; }

# The offline kit gpu/run.sh installs on a GPU node that cannot reach a registry: the wheels of
# gpu/kit.txt at constraints.txt's versions for the node's Python (GPU_PYTHON, manylinux x86-64),
# without dependencies, plus the Flax that gpu/run.sh falls back on when the node's has no working
# NNX (GPU_FLAX: Flax 0.12.8 to 0.12.9 fail to import beside JAX 0.11, the node's), and the commit
# the kit was made from (the node gets no .git). pip matches each manylinux tag exactly, hence the
# list.
GPU_PYTHON ?= 3.12
GPU_FLAX ?= 0.12.12
GPU_KIT := gpu/kit
GPU_PLATFORMS := $(foreach n,28 27 26 17 5,--platform manylinux_2_$(n)_x86_64) \
	--platform manylinux2014_x86_64 --platform manylinux1_x86_64
GPU_DOWNLOAD = $(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: \
	--python-version $(GPU_PYTHON) --implementation cp $(GPU_PLATFORMS)
gpu-kit:
	rm -rf $(GPU_KIT) && mkdir -p $(GPU_KIT)/fallback
	$(GPU_DOWNLOAD) -c constraints.txt -d $(GPU_KIT) -r gpu/kit.txt
	$(GPU_DOWNLOAD) -d $(GPU_KIT)/fallback flax==$(GPU_FLAX)
	{ git rev-parse HEAD; git status --porcelain --untracked-files=no | grep -q . && echo dirty || echo clean; } \
	  | paste -sd' ' > $(GPU_KIT)/COMMIT
	@du -sh $(GPU_KIT); ls $(GPU_KIT) | wc -l

# A lease on this CPU with the node image's versions (Python 3.12, its torch): gpu/rehearse.sh
# builds that environment once in local/gpu-rehearsal/ (PyPI; about 4 GB), makes the kit for it
# and runs gpu/run.sh from a copy without .git.
gpu-rehearsal:
	bash gpu/rehearse.sh

# onnxruntime-web, pinned by web/package-lock.json, for the browser runtimes of 14_web_audio.
web: web/node_modules/.fwbench-installed

# again whenever the lockfile changes (a version bump reinstalls)
web/node_modules/.fwbench-installed: web/package-lock.json
	npm ci --prefix web --no-audit --no-fund
	touch $@

clean-db:
	rm -f executed/fwbench.duckdb
