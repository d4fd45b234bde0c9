"""Hydra composing a single run's config in a forked child, while the run imports its modules.

A command never run before (no entry in ``sim.startup.compose_cache``) pays twice before its
first event: about 190 ms for Hydra to import and compose the config, and about 250 ms to
import what the run needs (OmegaConf, numpy, pydantic, pyarrow, SimPy). Neither needs the
other, so where the process may run on a second core ``ComposeAhead`` forks it before either
starts: the child checks the overrides (``sim.config.compose.check_overrides``) and composes,
and sends each outcome back through a pipe as it has it, while the parent imports. The run gets
exactly what it would have composed itself (the same objects, pickled), and the refusals in the
same order: the override check's before the output folder's, Hydra's after.

The child is a convenience, never a reason to fail. Where it cannot help (no ``fork``, not
Linux, one usable core, other threads running, ``FLEETCAST_COMPOSE_AHEAD=0``) nothing is
forked; where it fails in any way of its own (it ends, sends something unreadable, or says
nothing for ``ANSWER_TIMEOUT_S``), the parent checks and composes in-process, as without it.
The parent always reaps it (``close``), killing it first if the run no longer needs it.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import time
from typing import Any, cast

from sim.startup.compose_cache import ComposeCache, ComposedRun, ComposeFailed, turned_off
from sim.errors import ConfigError

# far beyond what composing takes on a loaded machine (a second or two): a child silent this
# long is stuck, and the run composes without it
ANSWER_TIMEOUT_S = 60.0
_HEADER = struct.Struct("<Q")  # each message: its length, then the pickle
# the messages, in order: the override check's answer, Hydra's, the texts of .hydra/
_CHECKED, _COMPOSED, _COMPOSE_REFUSED, _TEXTS = "checked", "composed", "compose refused", "texts"


class ComposeAhead:
    """One child composing the command line of ``cache``; ``check``, ``compose`` and the
    composed run's texts give what the override check and Hydra gave there, each waiting for
    the child's answer when first asked, and ``close`` reaps the child.
    """

    def __init__(self, pid: int, pipe: int, cache: ComposeCache) -> None:
        self.pid, self.pipe, self.cache = pid, pipe, cache
        self._answers: list[tuple[Any, ...]] = []
        self._broken = False  # the child failed: whatever it has not answered is done here
        self._closed = False

    @classmethod
    def start(cls, cache: ComposeCache) -> ComposeAhead | None:
        """The child composing the command line of ``cache``, or None where forking would not
        help (or cannot be done)."""
        if not _worth_forking():
            return None
        for stream in (sys.stdout, sys.stderr):  # or the child would print it again
            stream.flush()
        try:
            read_end, write_end = os.pipe()
        except OSError:  # out of file descriptors: compose in-process
            return None
        try:
            pid = os.fork()
        except OSError:  # out of processes
            os.close(read_end)
            os.close(write_end)
            return None
        if pid == 0:  # the child never returns into the parent's stack
            try:
                os.close(read_end)
                _compose_in_child(write_end, cache)
            finally:
                os._exit(1)
        os.close(write_end)
        return cls(pid, read_end, cache)

    def answered(self) -> bool:
        """Whether the override check's answer (or the child's end) can be read without
        waiting."""
        if self._answers or self._broken:
            return True
        return bool(select.select([self.pipe], [], [], 0)[0])

    def check(self) -> None:
        """Raise the override check's ``ConfigError``, as ``check_overrides`` would (run here
        where the child could not say)."""
        answer = self._answer(0, _CHECKED)
        if answer is None:
            from sim.config.compose import check_overrides

            check_overrides(self.cache.overrides)
        elif answer[1] is not None:
            raise answer[1]

    def compose(self) -> ComposedRun:
        """The config composed by Hydra, or its refusal (``ComposeFailed``, with the message of
        the ``ComposeFailed`` or ``ConfigError`` that ``ComposeCache.compose`` raised there;
        composed here where the child could not)."""
        answer = self._answer(1, _COMPOSED, _COMPOSE_REFUSED)
        if answer is None:
            return self.cache.compose()
        if answer[0] == _COMPOSE_REFUSED:
            raise ComposeFailed(answer[1])
        config, choices, run_dir, resolved_run_dir = answer[1:]
        return ComposedRun(
            config, choices, run_dir, texts=self._texts, resolved_run_dir=resolved_run_dir
        )

    def close(self) -> None:
        """Close the pipe and reap the child, killed first if it has not finished (the run
        ended before needing all of its answers)."""
        if self._closed:
            return
        self._closed = True
        self._broken = True  # what it has not answered is done here from now on
        os.close(self.pipe)
        if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
            # The system reaps it, and its pid may already be another process's: no signal.
            # Still composing, it ends when it writes to the closed pipe.
            return
        if len(self._answers) < 3:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped by a SIGCHLD handler of the caller's
            pass

    def _texts(self) -> dict[str, str]:
        """The texts of ``.hydra/``, as the child wrote them (or as Hydra writes them here,
        where the child ended first)."""
        answer = self._answer(2, _TEXTS)
        if answer is None:
            return self.cache.compose().texts
        return cast(dict[str, str], answer[1])

    def _answer(self, index: int, *kinds: str) -> tuple[Any, ...] | None:
        """The child's answer number ``index`` (one of ``kinds``), or None where it has
        failed before giving it."""
        while len(self._answers) <= index and not self._broken:
            message = self._receive()
            if message is None:
                self._broken = True
            else:
                self._answers.append(message)
        if len(self._answers) <= index:
            return None
        answer = self._answers[index]
        assert answer[0] in kinds, f"the child answered {answer[0]!r} out of turn"
        return answer

    def _receive(self) -> tuple[Any, ...] | None:
        """The child's next message, or None: the pipe closed, a message cut short or
        unreadable, or nothing for ``ANSWER_TIMEOUT_S``."""
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        header = self._read(_HEADER.size, deadline)
        if header is None:
            return None
        data = self._read(_HEADER.unpack(header)[0], deadline)
        if data is None:
            return None
        try:
            message = pickle.loads(data)
        except Exception:  # not a message of this protocol
            return None
        return message if isinstance(message, tuple) and message else None

    def _read(self, size: int, deadline: float) -> bytes | None:
        """Exactly ``size`` bytes from the pipe, or None where it closes or the deadline
        passes first."""
        chunks, left = [], size
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([self.pipe], [], [], wait)[0]:
                return None
            chunk = os.read(self.pipe, min(left, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


def _worth_forking() -> bool:
    """Whether a child could compose beside this process: Linux (forking before any thread or
    native library that minds it has started; macOS advises against fork without exec), one
    thread in the process (a fork copies only the calling thread, and the locks others
    hold), and at least two cores it may run on (its affinity; a CPU quota is not read)."""
    if turned_off("FLEETCAST_COMPOSE_AHEAD"):
        return False
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return False
    try:
        if len(os.listdir("/proc/self/task")) != 1:  # every thread, however it was started
            return False
    except OSError:
        return False
    return len(os.sched_getaffinity(0)) >= 2


def _send(pipe: int, message: tuple[Any, ...]) -> None:
    """Write ``message`` whole to ``pipe`` (its length first: the parent reads exactly it)."""
    data = pickle.dumps(message)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(pipe, view) :]


def _compose_in_child(pipe: int, cache: ComposeCache) -> None:
    """Check and compose the command line of ``cache``, sending each answer through ``pipe``
    as it comes, then leave the process (``os._exit``: the parent's exit handlers are not the
    child's to run)."""
    # Ctrl-C ends the child where it is (the parent composes if it still needs to)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    status = 1
    try:
        from sim.config.compose import check_overrides

        try:
            check_overrides(cache.overrides)
        except ConfigError as err:
            _send(pipe, (_CHECKED, err))
        else:
            _send(pipe, (_CHECKED, None))
            try:
                composed = cache.compose()
            except (ComposeFailed, ConfigError) as err:  # Hydra's refusal, an interpolation's
                _send(pipe, (_COMPOSE_REFUSED, str(err)))
            else:
                _send(
                    pipe,
                    (
                        _COMPOSED,
                        composed.config,
                        composed.choices,
                        composed.run_dir,
                        composed.resolved_run_dir,
                    ),
                )
                _send(pipe, (_TEXTS, composed.texts))  # written while the run has started
        status = 0
    except BaseException:  # anything else: the parent does the rest itself, and reports it
        pass
    finally:
        for stream in (sys.stdout, sys.stderr):  # what Hydra warned about (flushed before)
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)
