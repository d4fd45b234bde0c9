"""Which packages the distribution holds; everything else is in pyproject.toml.

``configs/`` and ``data/`` sit at the repository's top level and travel inside the package as
``sim.configs`` and ``sim.data`` (``sim/resources.py`` finds them through the import system).
Setuptools ships files in subfolders only for folders it is told are packages, so every
subfolder of the two is listed here, found on disk rather than written out by hand.

With ``FLEETCAST_COMPILE=1`` the modules of the simulation loop (``build_backend.COMPILED``) are
also compiled to C extensions with mypyc, which needs mypy and a C compiler at build time
(``build_backend.py`` asks for mypy then). The compiled build runs the same code, about twice as
fast in the loop; the README's Speed section has the figures, ``make test-compiled`` runs the
suite against it.
"""

from pathlib import Path

from setuptools import find_namespace_packages, find_packages, setup

from build_backend import COMPILED, compiling

ROOT = Path(__file__).resolve().parent
DATA_PACKAGES = {"sim.configs": "configs", "sim.data": "data"}


def compiled_extensions() -> list:
    """The loop's modules as mypyc extensions when ``FLEETCAST_COMPILE`` asks, else none."""
    if not compiling():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        raise SystemExit(
            "FLEETCAST_COMPILE=1: mypyc (it comes with mypy) is not installed here; "
            "pip install mypy, or build with pip's build isolation"
        ) from None

    # one shared library for all of them (fleetcast__mypyc), so that calls between modules
    # are native calls
    return mypycify(COMPILED, opt_level="3", group_name="fleetcast")


def folder_packages(package: str, folder: str) -> list[str]:
    """``package`` and one package per subfolder of ``folder`` (caches and hidden ones aside)."""
    base = ROOT / folder
    subfolders = sorted(
        p
        for p in base.rglob("*")
        if p.is_dir() and not any(part.startswith(("_", ".")) for part in p.relative_to(base).parts)
    )
    return [package] + [".".join((package, *p.relative_to(base).parts)) for p in subfolders]


setup(
    # hydra_plugins is a namespace package that Hydra's plugins share
    packages=find_packages(include=["sim", "sim.*"])
    + find_namespace_packages(include=["hydra_plugins", "hydra_plugins.*"])
    + [
        name
        for package, folder in DATA_PACKAGES.items()
        for name in folder_packages(package, folder)
    ],
    package_dir=DATA_PACKAGES,
    package_data={"sim.configs": ["**/*.yaml"], "sim.data": ["**/*"]},
    exclude_package_data={"": ["__pycache__/*", "*.pyc"]},
    ext_modules=compiled_extensions(),
)
