"""Hydra composing a single run's config in a forked child, while the run imports its modules.

A command never run before (no entry in ``sim.config.compose_cache``) pays twice before its
first event: about 190 ms for Hydra to import and compose the config, and about 250 ms to
import what the run needs (numpy, pydantic, pyarrow, SimPy). Neither needs the other, so on a
machine with a second core ``ComposeAhead`` forks the process before either starts: the child
checks the overrides and composes (``sim.config.compose.check_overrides``, then Hydra), and
sends the outcome back through a pipe, while the parent imports. The run gets exactly what it
would have composed itself (the same objects, pickled), and the refusals in the same order:
the override check's before the output folder's, Hydra's after.

The child is a convenience, never a reason to fail. Where it cannot help (no ``fork``, not
Linux, one usable core, threads already running, ``FLEETCAST_COMPOSE_AHEAD=0``) nothing is
forked; where it fails in any way of its own, the parent checks and composes in-process, as
without it, and reports what went wrong there.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any, BinaryIO, cast

from sim.config.compose_cache import ComposeCache, ComposedRun, ComposeFailed
from sim.errors import ConfigError

_CHECK_REFUSED, _COMPOSE_REFUSED, _COMPOSED = "check refused", "compose refused", "composed"


class ComposeAhead:
    """One child composing the command line of ``cache``; ``check`` and ``compose`` give what
    the override check and Hydra gave there (each waits for the child the first time).

    The child sends two messages: the outcome (the config, or a refusal), then the texts of
    ``.hydra/`` (``ComposedRun.texts``), which it writes while the parent's run has started.
    """

    def __init__(self, pid: int, pipe: int, cache: ComposeCache) -> None:
        self.pid, self.cache = pid, cache
        self._pipe: BinaryIO | None = os.fdopen(pipe, "rb")
        self._outcome: tuple[Any, ...] | None = None
        self._waited = False

    @classmethod
    def start(cls, cache: ComposeCache) -> ComposeAhead | None:
        """The child composing the command line of ``cache``, or None where forking would not
        help."""
        if not _worth_forking():
            return None
        read_end, write_end = os.pipe()
        try:
            pid = os.fork()
        except OSError:  # no processes left to the user: compose in-process
            os.close(read_end)
            os.close(write_end)
            return None
        if pid == 0:  # the child: never returns
            os.close(read_end)
            _compose_in_child(write_end, cache)
        os.close(write_end)
        return cls(pid, read_end, cache)

    def check(self) -> None:
        """Raise the override check's ``ConfigError``, as ``check_overrides`` would (run here
        where the child could not say)."""
        outcome = self._wait()
        if outcome is None:
            from sim.config.compose import check_overrides

            check_overrides(self.cache.overrides)
        elif outcome[0] == _CHECK_REFUSED:
            raise outcome[1]

    def compose(self) -> ComposedRun:
        """The config composed by Hydra, or its refusal (``ComposeFailed``), as
        ``ComposeCache.compose`` gives them (composed here where the child could not)."""
        outcome = self._wait()
        if outcome is None or outcome[0] == _CHECK_REFUSED:
            return self.cache.compose()
        if outcome[0] == _COMPOSE_REFUSED:
            self._finish()
            raise ComposeFailed(outcome[1])
        config, choices, run_dir, resolved_run_dir = outcome[1:]
        return ComposedRun(
            config, choices, run_dir, texts=self._texts, resolved_run_dir=resolved_run_dir
        )

    def _wait(self) -> tuple[Any, ...] | None:
        """The child's outcome, or None where it ended without one."""
        if not self._waited:
            self._waited = True
            self._outcome = self._receive()
            if self._outcome is None:
                self._finish()
        return self._outcome

    def _texts(self) -> dict[str, str]:
        """The texts of ``.hydra/``, as the child wrote them (or as Hydra writes them here,
        where the child ended first)."""
        texts = self._receive()
        self._finish()
        if texts is None:
            return self.cache.compose().texts
        return cast(dict[str, str], texts)

    def _receive(self) -> Any:
        """The child's next message, or None where it has no more."""
        if self._pipe is None:
            return None
        try:
            return pickle.load(self._pipe)
        except Exception:  # the pipe closed, or a message cut short
            return None

    def _finish(self) -> None:
        """Close the pipe and reap the child."""
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
            os.waitpid(self.pid, 0)


def _worth_forking() -> bool:
    """Whether a child could compose beside this process: Linux (where forking a process that
    has imported only the standard library is safe; macOS advises against fork without exec),
    a second core to run on, no threads that a fork would leave behind in the child."""
    if os.environ.get("FLEETCAST_COMPOSE_AHEAD", "1").strip().lower() in ("0", "false", "no"):
        return False
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return False
    return len(os.sched_getaffinity(0)) >= 2


def _compose_in_child(pipe: int, cache: ComposeCache) -> None:
    """Check and compose the command line of ``cache``, send the outcome and then the texts
    through ``pipe``, and leave the process (``os._exit``: the parent's exit handlers and
    buffers are not the child's to run)."""
    status = 1
    try:
        from sim.config.compose import check_overrides

        composed = None
        outcome: tuple[Any, ...]
        try:
            check_overrides(cache.overrides)
        except ConfigError as err:
            outcome = (_CHECK_REFUSED, err)
        else:
            try:
                composed = cache.compose()
            except ComposeFailed as err:
                outcome = (_COMPOSE_REFUSED, str(err))
            else:
                outcome = (
                    _COMPOSED,
                    composed.config,
                    composed.choices,
                    composed.run_dir,
                    composed.resolved_run_dir,
                )
        with os.fdopen(pipe, "wb") as out:
            out.write(pickle.dumps(outcome))  # whole, or not at all
            out.flush()
            if composed is not None:
                out.write(pickle.dumps(composed.texts))
        status = 0
    except BaseException:  # anything else: the parent does it again, and reports it
        pass
    finally:
        for stream in (sys.stdout, sys.stderr):  # what Hydra may have warned about
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)
