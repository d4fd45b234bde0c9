# make demo   set up a virtual environment, install Fleetcast, run the default simulation
# make test   set up the same environment and run the test suite
# make bench  print the speed benchmark figures

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m sim output_dir=outputs/demo

test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 tests

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_speed.py

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
