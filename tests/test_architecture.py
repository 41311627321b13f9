"""The dependency walls of docs/architecture.md, checked by parsing every import, and the role
table's factory arguments, checked against what the loop passes."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Which first-party packages each package may import (besides itself and the kernel). Leaves
#: import only the kernel; libraries (mcts, common, loop) only what is below them; an algorithm
#: plugin the libraries, never another algorithm plugin.
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
    "lzk_common": {"lzk_mcts"},
    "lzk_muzero": {"lzk_common", "lzk_mcts"},
    "lzk_efficientzero": {"lzk_common", "lzk_mcts"},
    "lzk_rezero": {"lzk_loop"},
    "lzk_unizero": {"lzk_common", "lzk_mcts", "lzk_loop"},
    "lzk_alphazero": {"lzk_common", "lzk_mcts", "lzk_loop"},
}
#: The algorithm plugins: none may import another (shared code lives in lzk_common).
ALGORITHMS = {"lzk_muzero", "lzk_rezero", "lzk_unizero", "lzk_alphazero", "lzk_efficientzero"}


def _packages() -> dict[str, Path]:
    pkgs = {"lzkernel": ROOT / "lzkernel"}
    for p in sorted((ROOT / "plugins").iterdir()):
        if p.is_dir() and (p / "__init__.py").exists():
            pkgs[p.name] = p
    return pkgs


#: A string argument naming a module ("pkg.mod", "pkg.mod:attr"): an import by name
#: (``importlib.import_module``, factory strings), walled like an import statement.
_MODULE_STRING = re.compile(r"^([A-Za-z_]\w*)(?:(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?|:[A-Za-z_]\w*)$")


def _imports(path: Path) -> set[str]:
    """Top-level packages ``path`` imports: import statements anywhere (lazy ones included) and
    module names passed as string arguments to a call."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    m = _MODULE_STRING.match(arg.value)
                    if m:
                        found.add(m.group(1))
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


def test_no_algorithm_plugin_imports_another() -> None:
    algorithms = ALGORITHMS & set(_packages())
    assert {"lzk_muzero", "lzk_unizero", "lzk_efficientzero"} <= algorithms
    hits = [f"{path.relative_to(ROOT)} imports {mod}" for name in algorithms for path in _packages()[name].rglob("*.py")
            for mod in _imports(path) & (algorithms - {name})]
    assert not hits, "\n".join(hits)


def test_the_kernel_imports_no_plugin() -> None:
    plugins = set(_packages()) - {"lzkernel"}
    hits = [f"{path.relative_to(ROOT)} imports {mod}" for path in (ROOT / "lzkernel").rglob("*.py")
            for mod in _imports(path) & plugins]
    assert not hits, "\n".join(hits)


def test_every_factory_call_of_the_loop_matches_the_role_table(tmp_path: Path) -> None:
    """Build a real loop trainer (ReZero on CartPole) with every factory wrapped: each role's
    factory is called with exactly the keyword arguments the role table documents, and
    ``run.build`` refuses others."""
    import pytest

    from lzkernel import ROLE_TABLE
    from lzkernel.config.loader import load_config
    from lzkernel.pluginmanager import Kernel
    from lzkernel.run import RunContext

    kernel = Kernel()
    seen: dict[str, set[str]] = {}
    for role, comp in list(kernel.registry.items()):
        def spy(cfg, run, _factory=comp.factory, _role=role, **kwargs):  # noqa: ANN001, ANN202
            seen[_role] = set(kwargs)
            return _factory(cfg, run, **kwargs)
        object.__setattr__(comp, "factory", spy)
    config = load_config(ROOT / "configs" / "cartpole_rezero_fast.yaml",
                         [f"run.out_dir={tmp_path}", "run.progress=false"], kernel.registry)
    with RunContext(kernel, config) as run:
        run.build("trainer")
        for spec in ROLE_TABLE:
            assert seen.get(spec.name) == set(spec.kwarg_names), (spec.name, seen.get(spec.name))
        with pytest.raises(TypeError, match="role table"):
            run.build("collector", env_spec=None)  # frame_stack missing


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


def test_imports_by_name_count_as_imports(tmp_path: Path) -> None:
    """The walls see lazy imports and module names handed to importlib or a factory as strings;
    prose in docstrings and plain strings that name no module are not imports."""
    src = tmp_path / "m.py"
    src.write_text('"""Mentions lzk_muzero.policy in prose."""\n'
                   "import importlib\n"
                   "def f():\n"
                   "    from lzk_mcts import search\n"
                   "    importlib.import_module('lzk_unizero.model')\n"
                   "    make(path='lzk_alphazero.net:Net')\n"
                   "    print('done.')\n", encoding="utf-8")
    assert _imports(src) == {"importlib", "lzk_mcts", "lzk_unizero", "lzk_alphazero"}
