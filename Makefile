# make demo      set up .venv with what a simulation needs, and run the default simulation
# make test      set up .venv with the test and lint tools too, and run the test suite
# make lint      ruff (lint and format) and mypy on sim/, in the same .venv
# make test-deep the property tests with twenty times the examples (nightly; ~5 minutes)
# make test-ray  the suite again in .venv-ray, with the Ray extra (Ray launcher test included)
# make compiled  the compiled build (FLEETCAST_COMPILE=1: the loop's modules compiled with
#                mypyc) in a copy of the tree, build/compiled (a C compiler is needed)
# make test-compiled  the suite against it
# make docs      the documentation site into site/ (mkdocs build --strict: a broken link fails)
# make bench     print the benchmark figures: speed, scale, start-up, sweep throughput, fidelity
#                (calibrated, and the roofline alone on the 177 runs and the harness samples)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# PYTHONWARNINGS: setuptools' notice that an install is editable is not news here
PIP := PYTHONWARNINGS=ignore $(PY) -m pip install --quiet --disable-pip-version-check

VENV_RAY ?= .venv-ray
PY_RAY := $(VENV_RAY)/bin/python

# PyTorch for the `fleetcast profile` tests, the CPU build from PyTorch's own index (PyPI's torch
# is a multi-GB CUDA build). Without it those tests are skipped and say why.
TORCH_CPU := 'torch==2.13.0+cpu' --extra-index-url https://download.pytorch.org/whl/cpu

.PHONY: demo test test-deep lint test-ray compiled test-compiled bench docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# what running needs: the core dependencies, no test tools, no PyTorch
$(VENV)/.installed-run: pyproject.toml setup.py | $(PY)
	$(PIP) -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml setup.py | $(PY)
	$(PIP) -e '.[test,lint]'
	$(PIP) --retries 1 --timeout 20 $(TORCH_CPU) 2> $(VENV)/torch-install.log \
		|| echo "PyTorch (CPU) not installed ($(VENV)/torch-install.log): the profile tests will be skipped"
	touch $(VENV)/.installed-run $@

demo: $(VENV)/.installed-run
	$(PY) -m sim output_dir=outputs/demo

test: $(VENV)/.installed-test
	$(PY) -m pytest -q -n 2 tests

PROPERTY_TESTS := tests/test_run_properties.py tests/engine/scheduler/test_properties.py \
	tests/engine/test_kv_cache_properties.py

test-deep: $(VENV)/.installed-test
	HYPOTHESIS_PROFILE=deep $(PY) -m pytest -q -n 2 $(PROPERTY_TESTS) --hypothesis-show-statistics

lint: $(VENV)/.installed-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# Ray pins an older cloudpickle than joblib 1.6 wants: its own environment (docs/how-to/sweeps-on-ray.md)
$(VENV_RAY)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV_RAY)
	$(PY_RAY) -m pip install --quiet --upgrade pip
	$(PY_RAY) -m pip install --quiet -e '.[test,ray]'
	touch $@

test-ray: $(VENV_RAY)/.installed
	RAY_USAGE_STATS_ENABLED=0 $(PY_RAY) -m pytest -q -n 2 tests

# A copy of the working tree (what git tracks or would track), with an index of its own so that
# the tests that copy "the checkout" find its files; the extensions are built beside the
# sources, and the suite imports them from there (PYTHONPATH: ahead of the editable install).
COMPILED := $(CURDIR)/build/compiled
compiled: $(VENV)/.installed-test
	rm -rf $(COMPILED) && mkdir -p $(COMPILED)
	git ls-files --cached --others --exclude-standard -z > $(COMPILED).files
	tar --null -C $(CURDIR) -T $(COMPILED).files --ignore-failed-read -cf - | tar -xf - -C $(COMPILED)
	cd $(COMPILED) && git init --quiet && git add --all
	cd $(COMPILED) && FLEETCAST_COMPILE=1 $(abspath $(PY)) setup.py --quiet build_ext --inplace

test-compiled: compiled
	cd $(COMPILED) && FLEETCAST_COMPILE=1 PYTHONPATH=$(COMPILED) $(abspath $(PY)) -m pytest -q -n 2 tests

$(VENV)/.installed-docs: pyproject.toml setup.py | $(PY)
	$(PIP) -e '.[docs]'
	touch $(VENV)/.installed-run $@

# the reference pages are written from the code as the site builds (docs/hooks/)
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir site

bench: $(VENV)/.installed-test
	$(PY) benchmarks/bench_speed.py
	$(PY) benchmarks/bench_scale.py
	$(PY) benchmarks/bench_startup.py
	$(PY) benchmarks/bench_sweep.py
	$(PY) benchmarks/fidelity.py
	$(PY) benchmarks/fidelity.py --roofline
	$(PY) benchmarks/fidelity_harness.py

clean:
	rm -rf $(VENV) $(VENV_RAY) outputs multirun .pytest_cache .mypy_cache .ruff_cache build site *.egg-info
