# The two commands a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
TEST_STAMP := $(VENV)/.installed-test-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: run test install install-test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

install: $(STAMP)
install-test: $(TEST_STAMP)

## Start the registry on 127.0.0.1:8080 (SQLite and blobs under ./.modelreg); the admin token is in .modelreg/admin-token.
run: install
	$(BIN)/modelreg serve --data-dir .modelreg --host 127.0.0.1 --port 8080

## Run the whole suite (SQLite, PostgreSQL at 127.0.0.1:5432, SeaweedFS S3 started by the tests).
test: install-test
	HF_HUB_DISABLE_TELEMETRY=1 $(BIN)/python -m pytest -q -p no:cacheprovider

bench: install-test
	$(BIN)/python bench/queue.py
	$(BIN)/python bench/mirror.py
	$(BIN)/python bench/scan.py

clean:
	rm -rf $(VENV) .modelreg
