"""``sim.signature.constructor``: a class's constructor as ``sim.config.build`` checks options
against it, the same for a plain class and for one whose ``__init__`` is not a Python function
(as in the compiled build), which is then read from its module's source."""

from __future__ import annotations

import importlib
import inspect
import sys
import typing

import pytest

from sim.engine.scheduler.vllm import VLLMScheduler
from sim.engine.step_time.roofline import RooflineStepTime
from sim.signature import _stub_from_source, constructor

SOURCE = """
from __future__ import annotations

from sim.engine.kv_cache import KVCache

LIMIT = 7


class Policy:
    def __init__(
        self, kv: KVCache, size: int = LIMIT, name: str | None = None, *, on: bool = True
    ) -> None:
        self.kv, self.size, self.name, self.on = kv, size, name, on


class Inherits(Policy):
    pass
"""


@pytest.fixture
def policy_module(tmp_path, monkeypatch):
    """A module ``fake_policy`` imported from a file (the sources read are parsed once per
    class: forgotten before and after)."""
    _stub_from_source.cache_clear()
    (tmp_path / "fake_policy.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("fake_policy")
    yield module
    sys.modules.pop("fake_policy", None)
    _stub_from_source.cache_clear()


def _as_if_compiled(cls: type) -> None:
    """A constructor that is not a Python function, as a compiled class's (no code object, no
    annotations): a slot wrapper."""
    cls.__init__ = object.__init__


@pytest.mark.parametrize("cls", [VLLMScheduler, RooflineStepTime])
def test_a_plain_class_gives_what_inspect_and_typing_give(cls):
    signature, hints = constructor(cls)
    assert signature == inspect.signature(cls)
    assert hints == typing.get_type_hints(cls.__init__)


def test_a_constructor_without_python_code_is_read_from_the_source(policy_module):
    plain_signature, plain_hints = constructor(policy_module.Policy)
    _as_if_compiled(policy_module.Policy)
    assert not inspect.isfunction(vars(policy_module.Policy)["__init__"])
    signature, hints = constructor(policy_module.Policy)
    assert signature == plain_signature
    assert hints == plain_hints
    assert list(signature.parameters) == ["kv", "size", "name", "on"]
    assert signature.parameters["size"].default == 7  # evaluated in the module's namespace
    assert signature.parameters["on"].kind is inspect.Parameter.KEYWORD_ONLY
    assert hints["kv"] is importlib.import_module("sim.engine.kv_cache").KVCache
    assert hints["name"] == str | None
    # a subclass without its own __init__ has its base's
    assert constructor(policy_module.Inherits) == (signature, hints)


def test_a_compiled_class_without_its_source_says_so(policy_module, tmp_path):
    _as_if_compiled(policy_module.Policy)
    (tmp_path / "fake_policy.py").rename(tmp_path / "moved.py")
    with pytest.raises(RuntimeError, match=r"fake_policy\.Policy is compiled and its source"):
        constructor(policy_module.Inherits)
