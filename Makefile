# Two entry points for a fresh machine: `make fuzz` (short campaign) and `make test` (the suite).
# Each creates .venv and installs the pinned dependencies when missing.
VENV ?= .venv
PY := $(VENV)/bin/python
HAS_GPU := $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 1)
REQS := requirements/$(if $(HAS_GPU),gpu,cpu).txt
STAMP := $(VENV)/.installed-$(notdir $(basename $(REQS)))

.PHONY: fuzz test test-nightly install clean

install: $(STAMP)

$(STAMP): $(REQS) pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r $(REQS)
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

fuzz: $(STAMP)
	$(PY) -m fuzz run --budget quick

test: $(STAMP)
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} TBE_FUZZ_SANITIZE=$${TBE_FUZZ_SANITIZE:-1} $(PY) -m pytest -n 2 --dist worksteal -q -m "not nightly"

# the tests too long for CI (minutes each on the interpreter), then the suite at the nightly profile
test-nightly: $(STAMP)
	HYPOTHESIS_PROFILE=ci TBE_FUZZ_SANITIZE=$${TBE_FUZZ_SANITIZE:-1} $(PY) -m pytest -n 2 -q -m nightly
	HYPOTHESIS_PROFILE=nightly TBE_FUZZ_SANITIZE=$${TBE_FUZZ_SANITIZE:-1} $(PY) -m pytest -n 2 -q -m "fuzz and not nightly"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
