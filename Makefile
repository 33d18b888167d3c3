# The two README commands: `make demo` and `make test`. Each builds .venv from nothing when it
# is missing or older than pyproject.toml, so a fresh clone needs no other set-up step.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench venv clean

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[all,test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/causewatch demo --shards 2

# Two processes a core, a test file each at a time (a file's services start once; a service test spends
# about half its time waiting on its services, so two a core keep the cores busy); the files marked serial
# (they time this machine, so need it to themselves) then run alone, even when the first part failed;
# the first failing part's status is make's. As root it first installs the Debian packages the tests use.
# TESTS: the files or folders to run (all of tests/ unless told); "no tests collected" (5) passes.
TESTS ?= tests
WORKERS ?= $(shell echo $$(( 2 * $$(nproc) )))
test: $(STAMP)
	.ci/install-test-packages
	$(VENV)/bin/python -m pytest -q --durations=12 -n $(WORKERS) --dist loadfile --no-loadscope-reorder -m 'not serial' $(TESTS); parallel=$$?; \
	$(VENV)/bin/python -m pytest -q --durations=5 -m serial $(TESTS); serial=$$?; \
	for rc in $$parallel $$serial; do [ $$rc = 0 ] || [ $$rc = 5 ] || exit $$rc; done

# The inner loop: no services started for a test (daemons as processes, Slurm, Prometheus, Alertmanager, a
# Dask cluster), no test of many seconds and none that times the machine (markers `service`, `slow`,
# `serial`, pyproject.toml); installs nothing.
test-fast: $(STAMP)
	$(VENV)/bin/python -m pytest -q --durations=8 -n 2 --dist loadfile -m 'not serial and not service and not slow' $(TESTS)

# ruff and the import contracts alone (both also run in `make test`; `lint-imports` alone works too)
lint: $(STAMP)
	$(VENV)/bin/python -m pytest -q tests/core/test_ruff.py tests/core/test_part_rules.py

bench: $(STAMP)
	$(VENV)/bin/python -m pip install --quiet -e '.[all,test,bench]'
	# pgmpy/cdt only for their example networks and Sachs data files: their metadata pulls torch, so no deps
	$(VENV)/bin/python -m pip install --quiet --no-deps pgmpy==0.1.23 cdt==0.6.0
	# pgmpy 0.1.23 imports pkg_resources, which setuptools 81 removed
	$(VENV)/bin/python -m pip install --quiet pyparsing statsmodels opt-einsum tqdm joblib scikit-learn "setuptools<81"
	# anomaly_live.py at its defaults is the live goal's whole size (about nine hours), and anomaly_replay.py
	# replays a run anomaly_live.py stored: run them by hand
	for b in bench/*.py; do case $$b in bench/anomaly_live.py|bench/anomaly_replay.py) ;; \
		*) $(VENV)/bin/python $$b || exit 1 ;; esac; done

clean:
	rm -rf $(VENV) demo-out build *.egg-info
