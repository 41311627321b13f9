"""The dependency walls of docs/architecture.md, checked by parsing every import."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Which first-party packages each package may import (besides itself and the kernel).
ALLOWED: dict[str, set[str]] = {
    "lzkernel": set(),
    "lzk_comm": set(),
    "lzk_envs": set(),
    "lzk_mcts": set(),
    "lzk_replay": set(),
    "lzk_workers": set(),
    "lzk_schedule": set(),
    "lzk_sinks": set(),
    "lzk_loop": set(),
    "lzk_muzero": {"lzk_mcts"},
    "lzk_rezero": {"lzk_loop"},
    "lzk_unizero": {"lzk_muzero", "lzk_mcts", "lzk_loop"},
}


def _packages() -> dict[str, Path]:
    pkgs = {"lzkernel": ROOT / "lzkernel"}
    for p in sorted((ROOT / "plugins").iterdir()):
        if p.is_dir() and (p / "__init__.py").exists():
            pkgs[p.name] = p
    return pkgs


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_every_package_has_a_declared_wall() -> None:
    missing = sorted(set(_packages()) - set(ALLOWED))
    assert not missing, f"add these packages to ALLOWED with their permitted imports: {missing}"


def test_imports_respect_the_walls() -> None:
    first_party = set(_packages())
    violations = []
    for name, pkg in _packages().items():
        allowed = ALLOWED.get(name, set()) | {name} | ({"lzkernel"} if name != "lzkernel" else set())
        for path in pkg.rglob("*.py"):
            for mod in _imports(path) & first_party:
                if mod not in allowed:
                    violations.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert not violations, "\n".join(violations)


def test_plugin_entry_modules_do_not_import_torch_at_top_level() -> None:
    """`lzkernel plugins` imports every entry module; torch there would cost a second each."""
    heavy = {"torch", "gymnasium", "tensorboardX", "numba"}
    offenders = []
    for name, pkg in _packages().items():
        if name == "lzkernel":
            continue
        entry = [pkg / "plugin.py", pkg / "__init__.py"] + list(pkg.glob("jsonl.py")) + list(pkg.glob("progress.py"))
        for path in entry:
            if not path.exists():
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:  # module level only; imports inside factories are fine
                mods: set[str] = set()
                if isinstance(node, ast.Import):
                    mods = {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module:
                    mods = {node.module.split(".")[0]}
                if mods & heavy:
                    offenders.append(f"{path.relative_to(ROOT)}: {sorted(mods & heavy)}")
    assert not offenders, "\n".join(offenders)
