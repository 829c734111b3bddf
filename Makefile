# The two commands of the README. Both create .venv when it is missing and install the pinned
# environment (constraints.txt) once; the stamp file makes later calls skip the install.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fwbench-installed
CAMPAIGN ?= params/smoke.yaml

.PHONY: run test setup lint clean-db help

help:
	@echo "make run   set up .venv, run $(CAMPAIGN) and build its report"
	@echo "make test  set up .venv, lint (ruff) and run the test suite (pytest)"

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	$(BIN)/python -m ipykernel install --sys-prefix --name fwbench --display-name "fwbench (.venv)"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/fwbench run $(CAMPAIGN)

lint: $(STAMP)
	$(BIN)/ruff check lib tests notebooks
	$(BIN)/ruff format --check lib tests notebooks

test: lint
	$(BIN)/python -m pytest -q

clean-db:
	rm -f executed/fwbench.duckdb
