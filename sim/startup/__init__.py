"""What a run does before its first event: the collector paused, the config composed once.

- ``compose_cache``: a single run's composed config kept on disk, so the same command run
  again needs neither Hydra nor the override check;
- ``compose_ahead``: a command's config composed in a forked child, beside the run's imports;
- here: the garbage collector paused while a run starts (``STARTUP``, a ``StartupPause``), and
  the modules the run needs imported while the child composes (``import_until_checked``).

Measured by ``benchmarks/bench_startup.py``.

May import: the basics, ``sim.config.compose`` (the override check, ``to_dict``) and Hydra.
"""

from __future__ import annotations

import gc
import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.startup.compose_ahead import ComposeAhead


class StartupPause:
    """The cyclic garbage collector, paused while a run starts.

    Before its first event a run imports its modules and Hydra composes its config: about
    110,000 tracked objects, few of them garbage, over which the collector would make a dozen
    passes (about 20 ms of the half second to the first event, ``benchmarks/bench_startup.py``).
    ``begin`` pauses it; ``end`` (before the simulation) gives it back as it was. As the command
    (``freeze``: the process ends with the run), ``end`` first freezes what start-up built, so
    that the collector does not walk it again either; the ~10,000 objects of start-up garbage
    among it are held until the process exits. In-process callers (``main(argv)``), and
    processes that froze objects of their own, are not frozen: their garbage stays collectable.
    ``release`` (when ``main`` returns) undoes whatever is left.
    """

    def __init__(self) -> None:
        self.paused = self.freeze = self.frozen = self.was_enabled = False

    def begin(self, freeze: bool = False) -> None:
        if not self.paused:
            self.paused, self.was_enabled = True, gc.isenabled()
            self.freeze = freeze and gc.get_freeze_count() == 0
            gc.disable()

    def end(self) -> None:
        if self.paused:
            self.paused = False
            if self.freeze:
                gc.freeze()
                self.frozen = True
            if self.was_enabled:
                gc.enable()

    def release(self) -> None:
        if self.paused:  # the run never started: nothing to freeze
            self.paused = False
            if self.was_enabled:
                gc.enable()
        if self.frozen:
            self.frozen = False
            gc.unfreeze()


STARTUP = StartupPause()


# What a simulation imports, in the order that brings the most with each (OmegaConf, numpy,
# pyarrow, SimPy, pydantic's models, then the simulator itself)
RUN_MODULES = (
    "omegaconf",
    "numpy",
    "pyarrow",
    "simpy",
    "sim.config.schema",
    "sim.run",
    "sim.output.run_files",
    "sim.output.summary_table",
)


def import_until_checked(ahead: ComposeAhead) -> list[str]:
    """Import what the run needs (``RUN_MODULES``) until the child ``ahead`` has answered the
    override check, and raise its refusal (as soon as it comes, between two imports). The
    modules left to import, while the child composes."""
    pending = list(RUN_MODULES)
    while pending and not ahead.answered():
        if not imported(pending.pop(0)):
            pending = []
    ahead.check()
    return pending


def imported(module: str) -> bool:
    """Import ``module`` ahead of need; False where it cannot be (a broken install, an edited
    checkout that does not import: reported where the run imports it, after the checks of
    its input)."""
    try:
        importlib.import_module(module)
    except Exception:
        return False
    return True
