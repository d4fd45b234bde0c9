"""Where a command's files go: ``output_dir=`` checked before anything is simulated, and made
absolute for Hydra's runner and launchers."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sim.config.compose import unresolvable_error
from sim.errors import ConfigError, require


def check_output_dir(argv: list[str]) -> None:
    """``output_dir=PATH`` must be a folder this process can write (checked before anything is
    simulated, so a long run does not end in a traceback). A path with an interpolation
    (``${oc.env:RUNS}/x``) is checked once composing has resolved it (``check_folder``)."""
    given = given_output_dir(argv)
    if given is not None and "${" not in given:
        check_folder(given)


def given_output_dir(argv: list[str]) -> str | None:
    """The ``output_dir=`` of the command line, None where it gives none (or null)."""
    given = [a.partition("=")[2] for a in argv if a.startswith("output_dir=")]
    return given[-1] if given and given[-1] not in ("", "null") else None


def check_folder(given: str) -> None:
    """Refuse ``output_dir=given`` unless it is, or can be made, a folder this process can
    write."""
    path = Path(os.path.expanduser(given))
    require(not path.exists() or path.is_dir(), "output_dir", given, "is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise ConfigError(
            "output_dir", given, f"cannot be written ({err.strerror or err})"
        ) from None


def hydra_dirs(argv: list[str]) -> list[str]:
    """Point Hydra's own folder at ``output_dir=...``: the run's folder for one run, the sweep
    folder (one subfolder per job) for a multirun. Otherwise Hydra would also create
    ``outputs/DATE/TIME`` beside it."""
    multirun = "-m" in argv or "--multirun" in argv
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    if any(a.startswith(key + "=") for a in argv):
        return []
    given = given_output_dir(argv)
    if given is not None:
        return [f"{key}={absolute_folder(given)}"]
    if multirun:  # Hydra's default sweep folder, made absolute
        return [f"{key}={os.path.abspath('multirun')}/${{now:%Y-%m-%d}}/${{now:%H-%M-%S}}"]
    return []


def absolute_folder(given: str) -> str:
    """``output_dir=given`` as an absolute path: a launcher may run the jobs in another
    directory (Ray workers start in the Ray node's directory, not the caller's), and Hydra
    resolves the job folders there. Its interpolations are resolved first where they need no
    config (``${oc.env:SCRATCH}/sweep``, which may be absolute itself); one that refers to the
    config (``runs/${seed}``) is left for Hydra to resolve, against the caller's directory."""
    if "${" in given:
        # imported here: OmegaConf (~56 ms of CPU), never needed by --help or report
        from omegaconf import OmegaConf
        from omegaconf.errors import InterpolationKeyError, OmegaConfBaseException

        alone = OmegaConf.create({"output_dir": given})
        try:
            given = str(alone.output_dir)
        except InterpolationKeyError:  # a key of the config: Hydra's to resolve
            return given
        except OmegaConfBaseException as err:
            raise unresolvable_error(alone, err) from None
    return os.path.abspath(os.path.expanduser(given))
