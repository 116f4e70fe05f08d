# The two commands a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
TEST_STAMP := $(VENV)/.installed-test-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: run test install install-test oci-peers bench clean

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
test: install-test oci-peers
	HF_HUB_DISABLE_TELEMETRY=1 $(BIN)/python -m pytest -q -p no:cacheprovider

## Debian's skopeo and docker-registry, the real OCI peers of tests/integration/test_oci_skopeo.py: installed with
## apt when missing and we are root; a tool still missing fails those tests under CI=true (never a silent skip).
oci-peers:
	@command -v skopeo >/dev/null && command -v docker-registry >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq skopeo docker-registry; } || \
	  echo "skopeo or docker-registry is missing and could not be installed (not root, or no apt-get)"

bench: install-test
	$(BIN)/python bench/queue.py
	$(BIN)/python bench/mirror.py
	$(BIN)/python bench/scan.py

clean:
	rm -rf $(VENV) .modelreg
