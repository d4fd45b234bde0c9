"""The parameters and annotations of a class's constructor, whether or not it is compiled.

``sim.config.build`` checks a policy's options against its constructor (names, defaults, types),
and the roofline reads its own keyword defaults. Python keeps both on a plain class. A class
compiled with mypyc (the optional compiled build, ``FLEETCAST_COMPILE=1``, see
docs/benchmarks.md) keeps no annotations, and the text signature mypyc gives it loses keyword-only
parameters and ``**`` catch-alls. For such a class the constructor is read from its module's
source, which the compiled build ships beside the extension module, and compiled as an empty
stub in the module's namespace: the same signature and the same annotations, resolved the same
way.
"""

from __future__ import annotations
import __future__

import ast
import importlib.util
import inspect
import sys
import typing
from functools import cache
from pathlib import Path
from typing import Any


def constructor(cls: type[Any]) -> tuple[inspect.Signature, dict[str, Any]]:
    """``cls(...)``'s parameters (without ``self``) and their resolved annotations."""
    owner = next(klass for klass in cls.__mro__ if "__init__" in vars(klass))
    init = vars(owner)["__init__"]
    if not inspect.isfunction(init):  # compiled (or object's own): read from the source
        if owner is object:
            return inspect.Signature(), {}
        init = _stub_from_source(owner.__module__, owner.__name__)
    signature = inspect.signature(init)
    parameters = list(signature.parameters.values())[1:]  # without self
    return signature.replace(parameters=parameters), typing.get_type_hints(init)


def compiled(module_file: str) -> bool:
    """Whether the module at ``module_file`` (its ``__file__``) is an extension module: the
    compiled build's."""
    return module_file.endswith((".so", ".pyd"))


@cache
def _stub_from_source(module_name: str, class_name: str) -> Any:
    """``__init__`` of the class ``class_name`` with an empty body, compiled from the source of
    its module (parsed once per class)."""
    module = sys.modules[module_name]
    try:
        spec = importlib.util.find_spec(module_name)
    except ValueError:  # __main__, or a module made at run time: no spec
        spec = None
    origin = Path(spec.origin if spec is not None and spec.origin else "")
    source = origin.with_name(module_name.rpartition(".")[2] + ".py")
    if not source.is_file():
        raise RuntimeError(
            f"{module_name}.{class_name}: its constructor is not Python code (a compiled "
            f"class) and its source ({source}) is missing: reinstall Fleetcast"
        )
    tree = ast.parse(source.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    item.body, item.decorator_list = [ast.Pass()], []
                    namespace = dict(vars(module))  # annotations and defaults resolve there
                    # annotations kept as strings, as the module's own future import keeps them
                    flags = __future__.annotations.compiler_flag
                    stub = ast.fix_missing_locations(ast.Module([item], []))
                    code = compile(stub, str(source), "exec", flags=flags)
                    exec(code, namespace)
                    return namespace["__init__"]
    raise RuntimeError(f"no __init__ of {class_name} in {source}")
