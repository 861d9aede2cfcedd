"""Every module of the package says what it offers (`__all__`), and offers what it says."""

from __future__ import annotations

import ast
import importlib
import os
from pathlib import Path

import pytest

import wirediff

ROOT = Path(wirediff.__file__).parent
MODULES = sorted(
    Path(folder, name)
    for folder, _, files in os.walk(ROOT)
    for name in files
    if name.endswith(".py") and name != "__main__.py"
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def public_definitions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        and not node.name.startswith("_")
    ]


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_a_module_with_functions_or_classes_declares_all(path: Path) -> None:
    module = importlib.import_module(module_name(path))
    names = getattr(module, "__all__", None)
    if names is None:
        assert not public_definitions(path), "public functions or classes, and no __all__"
        return
    assert sorted(set(names)) == sorted(names), "each name once"
    assert [n for n in names if not hasattr(module, n)] == []
