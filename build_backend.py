"""The build backend: setuptools' own, asking for mypy too when ``FLEETCAST_COMPILE=1`` (then
setup.py compiles the simulation loop with mypyc, which comes with mypy).

Named in pyproject.toml's ``[build-system]`` (``backend-path``), so that
``FLEETCAST_COMPILE=1 pip install .`` needs nothing installed beforehand but a C compiler.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403 (every other hook, as setuptools defines it)

# The simulation loop, what runs per step and per request (setup.py compiles these). Each class
# family is compiled whole: an interpreted subclass of a compiled class is refused unless the
# class allows it (mypyc_attr(allow_interpreted_subclasses=True): the bases users extend, and
# the engine's state, which tests copy), and a compiled class built on an interpreted one would
# not be native.
COMPILED = [
    "sim/engine/request.py",
    "sim/engine/step_shape.py",
    "sim/engine/kv_cache.py",
    "sim/engine/prefix_cache.py",
    "sim/engine/host_tier.py",
    "sim/engine/speculation.py",
    "sim/engine/scheduler/base.py",
    "sim/engine/scheduler/plan.py",
    "sim/engine/scheduler/vllm.py",
    "sim/engine/scheduler/sarathi.py",
    "sim/engine/scheduler/prefill_first.py",
    "sim/engine/scheduler/static.py",
    "sim/engine/scheduler/sglang.py",
    "sim/engine/scheduler/trtllm.py",
    "sim/engine/step_time/base.py",
    "sim/engine/step_time/constant.py",
    "sim/engine/step_time/linear.py",
    "sim/engine/step_time/floors.py",
    "sim/engine/step_time/roofline.py",
    "sim/engine/step_time/calibrated.py",
    "sim/fleet/simclock.py",
    "sim/fleet/frontend.py",
    "sim/fleet/admission.py",
    "sim/fleet/router.py",
    "sim/fleet/replica.py",
    "sim/fleet/cluster.py",
    "sim/output/metrics.py",
    "sim/output/request_log.py",
]

# mypyc 1.16 and later trip over a constructor's **kwargs after defaults (none compiled has
# one); the range the compiled build was tested with. With it, the stubs mypy needs for what
# the compiled modules import and have none of their own (as the lint extra has them).
MYPYC = ["mypy>=1.18,<2.5", "types-PyYAML", "types-tqdm"]


def compiling() -> bool:
    """Whether ``FLEETCAST_COMPILE`` asks for the compiled build (unset, 0, false, no: not)."""
    return os.environ.get("FLEETCAST_COMPILE", "0").strip().lower() not in ("", "0", "false", "no")


def runtime_dependencies() -> list[str]:
    """The project's dependencies (pyproject.toml): mypyc type-checks the compiled modules
    against them (numpy, SimPy, pydantic, ...), so a compiling build environment needs them."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: tomli, a build requirement there
        import tomli as tomllib
    with open(Path(__file__).with_name("pyproject.toml"), "rb") as file:
        return list(tomllib.load(file)["project"]["dependencies"])


@contextmanager
def _not_compiling() -> Iterator[None]:
    """Run setup.py without compiling: to list requirements (mypy is not there yet), for the
    metadata and for the sdist (neither holds extensions)."""
    asked = os.environ.get("FLEETCAST_COMPILE")
    os.environ["FLEETCAST_COMPILE"] = "0"
    try:
        yield
    finally:
        if asked is None:
            del os.environ["FLEETCAST_COMPILE"]
        else:
            os.environ["FLEETCAST_COMPILE"] = asked


def _with_mypy(hook: Callable[[Any], list[str]], config_settings: Any) -> list[str]:
    """``hook``'s requirements, plus mypy and the runtime dependencies when compiling."""
    if not compiling():
        return hook(config_settings)
    with _not_compiling():
        return [*hook(config_settings), *MYPYC, *runtime_dependencies()]


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return _with_mypy(build_meta.get_requires_for_build_wheel, config_settings)


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    return _with_mypy(build_meta.get_requires_for_build_editable, config_settings)


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    with _not_compiling():
        return build_meta.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    with _not_compiling():
        return build_meta.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    with _not_compiling():
        return build_meta.get_requires_for_build_sdist(config_settings)


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    with _not_compiling():
        return build_meta.build_sdist(sdist_directory, config_settings)
