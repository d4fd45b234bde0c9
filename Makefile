# make demo   set up a virtual environment, install Fleetcast, run the default simulation
# make test   set up the same environment and run the test suite
# make test-ray  the suite again in .venv-ray, with the Ray extra (Ray launcher test included)
# make bench  print the benchmark figures: speed, sweep throughput, fidelity

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

VENV_RAY ?= .venv-ray
PY_RAY := $(VENV_RAY)/bin/python

.PHONY: demo test test-ray bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	# PyTorch for the `fleetcast profile` test: 2.13.0 is the CPU build this machine kind keeps
	# on local disk (a plain `torch` would fetch a multi-GB CUDA build)
	$(PY) -m pip install --quiet 'torch==2.13.0'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m sim output_dir=outputs/demo

test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 tests

# Ray pins an older cloudpickle than joblib 1.6 wants: its own environment (docs/ray.md)
$(VENV_RAY)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_RAY)
	$(PY_RAY) -m pip install --quiet --upgrade pip
	$(PY_RAY) -m pip install --quiet -e '.[test,ray]'
	touch $@

test-ray: $(VENV_RAY)/.installed
	RAY_USAGE_STATS_ENABLED=0 $(PY_RAY) -m pytest -q -n 2 tests

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_speed.py
	$(PY) benchmarks/bench_sweep.py
	$(PY) benchmarks/fidelity.py

clean:
	rm -rf $(VENV) $(VENV_RAY) outputs multirun .pytest_cache
