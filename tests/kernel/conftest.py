"""Fixtures of the kernel tests: the fixture plugins installed as real distributions.

``tests/fixtures/demo_plugin`` (``lzkernel-demo`` 0.3.1) and ``tests/fixtures/broken_plugin``
(``lzkernel-broken`` 9.9.9) are pip-installed once per session with ``--target`` into a temporary
directory, then split into two directories so that each test chooses which ones are visible
(``PYTHONPATH`` for subprocesses, ``sys.path`` for in-process checks). importlib.metadata finds
their ``*.dist-info`` and entry points exactly as for a normal installation.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Iterator

import pytest

from ._util import FIXTURES


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """``.demo`` and ``.broken``: directories each holding one installed fixture distribution."""
    root = tmp_path_factory.mktemp("lzk_plugins")
    src = root / "src"
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests")
    for name in ("demo_plugin", "broken_plugin"):  # build from copies: the checkout stays clean
        shutil.copytree(FIXTURES / name, src / name, ignore=ignore)
    target = root / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--no-compile", "--target", str(target),
         str(src / "demo_plugin"), str(src / "broken_plugin")],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    demo, broken = root / "demo", root / "broken"
    demo.mkdir()
    broken.mkdir()
    for p in target.iterdir():
        p.rename((broken if p.name.startswith("lzkernel_broken") else demo) / p.name)
    assert (demo / "lzkernel_demo-0.3.1.dist-info").is_dir(), sorted(p.name for p in demo.iterdir())
    assert (broken / "lzkernel_broken-9.9.9.dist-info").is_dir(), sorted(p.name for p in broken.iterdir())
    return SimpleNamespace(demo=demo, broken=broken)


def _forget(prefixes: tuple[str, ...]) -> None:
    for name in [m for m in sys.modules if m.split(".")[0] in prefixes]:
        del sys.modules[name]


@pytest.fixture
def plugin_path(monkeypatch: pytest.MonkeyPatch, plugin_site: SimpleNamespace) -> Iterator[SimpleNamespace]:
    """In-process: put installed fixture plugins on ``sys.path`` (metadata visible, caches cleared).

    Call ``.add(plugin_site.demo)``; on teardown ``sys.path`` is restored and the fixture modules
    are dropped from ``sys.modules``.
    """
    monkeypatch.delenv("LZKERNEL_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    monkeypatch.delenv("LZKERNEL_PLUGINS", raising=False)
    _forget(("lzkernel_demo", "lzkernel_broken"))

    def add(path: Path) -> None:
        monkeypatch.syspath_prepend(str(path))  # also calls importlib.invalidate_caches()

    yield SimpleNamespace(add=add, site=plugin_site)
    _forget(("lzkernel_demo", "lzkernel_broken"))


@pytest.fixture
def demo_path(plugin_path: SimpleNamespace, plugin_site: SimpleNamespace) -> SimpleNamespace:
    """In-process: the demo plugin is installed (its metadata is visible)."""
    plugin_path.add(plugin_site.demo)
    return plugin_path
