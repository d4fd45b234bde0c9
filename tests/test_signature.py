"""``sim.signature.constructor``: a class's constructor as ``sim.config.build`` checks options
against it, the same for a plain class and for one whose ``__init__`` is not a Python function
(as in the compiled build), which is then read from its module's source."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
import typing

import pytest

from sim.config.build import target_class
from sim.signature import _stub_from_source, constructor
from tests.support import REPO_ROOT

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


def _shipped_targets() -> list[str]:
    """Every class the shipped configs name in ``_target_``."""
    names: set[str] = set()
    for path in (REPO_ROOT / "configs").rglob("*.yaml"):
        names |= set(re.findall(r"_target_:\s*([\w.]+)", path.read_text()))
    return sorted(names)


@pytest.mark.parametrize("target", _shipped_targets())
def test_every_shipped_policy_reads_the_same_from_its_source(target):
    """What ``build`` checks options against, for each policy: the same from the source (the
    compiled build's way) as from Python's own introspection (the interpreted build's)."""
    cls = target_class({"_target_": target}, "group")
    owner = next(klass for klass in cls.__mro__ if "__init__" in vars(klass))
    stub = _stub_from_source(owner.__module__, owner.__name__)
    stub_signature = inspect.signature(stub)
    without_self = list(stub_signature.parameters.values())[1:]
    from_source = (stub_signature.replace(parameters=without_self), typing.get_type_hints(stub))
    assert constructor(cls) == from_source
    if inspect.isfunction(vars(owner)["__init__"]):  # interpreted: what inspect and typing give
        assert from_source == (inspect.signature(cls), typing.get_type_hints(cls.__init__))


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
    with pytest.raises(RuntimeError, match=r"fake_policy\.Policy: .* its source .* is missing"):
        constructor(policy_module.Inherits)
