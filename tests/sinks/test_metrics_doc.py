"""docs/metrics.md lists every metric the first-party plugins log, and no metric they no longer log.

Names are found in the plugins' source: a quoted literal such as ``"collect/env_steps"``, or,
for names built from a namespace and a suffix (``f"train/{n}"`` over a tuple of names, the
reanalysis stats under ``reanalyze/``), the quoted suffix.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "metrics.md"
NAMESPACES = ("train", "collect", "eval", "search", "buffer", "sys", "time", "reanalyze")
LITERAL = re.compile(r"[\"']((?:%s)/[a-z_]+(?:/[a-z_]+)*)[\"']" % "|".join(NAMESPACES))
DOC_NAME = re.compile(r"`((?:%s)/[a-z_]+(?:/[a-z_]+)*)`" % "|".join(NAMESPACES))


def _source() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "plugins").rglob("*.py")))


def _documented() -> set[str]:
    return set(DOC_NAME.findall(DOC.read_text(encoding="utf-8")))


def test_every_metric_named_in_the_plugins_is_in_the_table() -> None:
    logged = set(LITERAL.findall(_source()))
    assert "collect/env_steps" in logged and "eval/return_mean" in logged  # the pattern finds them
    missing = sorted(logged - _documented())
    assert not missing, f"logged but not in docs/metrics.md: {missing}"


def _built(name: str, source: str) -> bool:
    """``name`` is logged by the source: a literal, or its suffix (``"loss_total"`` for
    ``f"train/{n}"``, ``/win_rate"`` for ``f"{prefix}/win_rate"``, ``"learn"`` for
    ``f"time/{phase}_s"``)."""
    suffix = name.split("/", 1)[1]
    last = name.rsplit("/", 1)[1]
    if name.startswith("time/") and suffix.endswith("_s"):
        return f'"{suffix[:-2]}"' in source
    return any(s in source for s in (f'"{name}"', f'"{suffix}"', f'/{last}"'))


def test_every_metric_in_the_table_is_still_logged() -> None:
    source = _source()
    gone = [name for name in sorted(_documented()) if not _built(name, source)]
    assert not gone, f"in docs/metrics.md but logged nowhere: {gone}"


def test_the_algorithm_pages_name_only_metrics_of_the_table() -> None:
    documented = _documented()
    pages = [*sorted((ROOT / "docs" / "algorithms").glob("*.md")), ROOT / "docs" / "board_games.md"]
    unknown = {}
    for page in pages:
        names = {n for n in DOC_NAME.findall(page.read_text(encoding="utf-8")) if not n.startswith("eval/vs_")}
        if names - documented:
            unknown[page.name] = sorted(names - documented)
    assert not unknown, f"metric names not in docs/metrics.md: {unknown}"
