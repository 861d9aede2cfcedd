"""The architecture page's layout list names every module of the tree, under its folder.

A module nobody can find in the layout is one a newcomer cannot place.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "wirediff/": ROOT / "wirediff",
    "cli/": ROOT / "wirediff" / "cli",
    "probe/": ROOT / "wirediff" / "probe",
    "engine/": ROOT / "wirediff" / "engine",
    "replay/": ROOT / "wirediff" / "replay",
    "record/": ROOT / "wirediff" / "record",
    "addons/": ROOT / "wirediff" / "addons",
    "analysis/comparison/": ROOT / "wirediff" / "analysis" / "comparison",
    "analysis/diagnosis/": ROOT / "wirediff" / "analysis" / "diagnosis",
    "reports/": ROOT / "wirediff" / "reports",
    "backends/": ROOT / "wirediff" / "backends",
}
FOLDER = re.compile(r"^ {0,2}(\S+/) {2,}(.*)$")


def layout() -> dict[str, str]:
    """Folder -> the text describing it, from docs/architecture.md's block that lists
    `wirediff/` first."""
    section = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = next(b for b in section.split("```")[1::2] if b.lstrip().startswith("wirediff/"))
    out: dict[str, str] = {}
    folder = ""
    for line in block.splitlines():
        if m := FOLDER.match(line):
            folder = m[1]
            out[folder] = m[2]
        elif folder:
            out[folder] += " " + line.strip()
    return out


def modules(package: Path) -> set[str]:
    """Module names in `package`; a sub-package's modules as `sub/name`."""
    names = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    for sub in package.iterdir():
        if (sub / "__init__.py").exists() and sub.name != "__pycache__":
            if sub.resolve() in {p.resolve() for p in PACKAGES.values()}:
                continue
            names |= {f"{sub.name}/{p.stem}" for p in sub.glob("*.py") if p.stem != "__init__"}
    return names


def named(text: str, module: str) -> bool:
    if "/" in module:
        sub, name = module.split("/")
        inside = re.search(rf"\b{re.escape(sub)}/ \(([^)]*(?:\([^)]*\)[^)]*)*)\)", text)
        return inside is not None and re.search(rf"\b{re.escape(name)}\b", inside[1]) is not None
    return re.search(rf"(?<![\w/.]){re.escape(module)}\b", text) is not None


def test_every_module_is_named_under_its_folder() -> None:
    described = layout()
    missing = [
        f"{folder}{module}"
        for folder, package in PACKAGES.items()
        for module in sorted(modules(package))
        if not named(described.get(folder, ""), module)
    ]
    assert missing == [], f"docs/architecture.md's layout does not name {missing}"


def test_the_check_would_notice_a_module_the_readme_leaves_out() -> None:
    described = layout()
    assert named(described["record/"], "store")
    assert not named(described["record/"], "queue")
    assert named(described["analysis/comparison/"], "conformance/grammar")
    assert not named(described["analysis/comparison/"], "conformance/frames")
