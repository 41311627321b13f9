"""Where a benchmark's output goes: its summary as JSON under benchmarks/results/ unless a path
is given, and the run directories kept with ``--keep``."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


#: Where benchmark summaries go by default.
RESULTS = Path(__file__).resolve().parent / "results"


def write_results(summary: dict[str, Any], default_name: str, path: str | None = None) -> Path:
    """Write ``summary`` as indented JSON to ``path`` or ``benchmarks/results/<default_name>``;
    print and return the path. Without ``path`` an existing file is never replaced (the
    committed results are the docs' evidence): the name gets the time, ``<stem>_<YYYYmmdd-HHMMSS>.json``."""
    out = Path(path) if path else RESULTS / default_name
    if not path and out.exists():
        stamped = out.with_name(f"{out.stem}_{time.strftime('%Y%m%d-%H%M%S')}{out.suffix}")
        n = 1
        while stamped.exists():  # two results within one second
            stamped, n = out.with_name(f"{out.stem}_{time.strftime('%Y%m%d-%H%M%S')}-{n}{out.suffix}"), n + 1
        out = stamped
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    print(f"written {out}")
    return out


def refuse_taken_keep_dirs(keep: Path | None, seeds: list[int]) -> None:
    """``--keep KEEP``: exit 2 with one line when a ``KEEP/seed<N>`` of these seeds already exists
    (its metrics.jsonl and checkpoints would pass an earlier run's evaluations off as this one's)."""
    if keep is None:
        return
    taken = [str(keep / f"seed{s}") for s in seeds if (keep / f"seed{s}").exists()]
    if taken:
        print(f"--keep: {', '.join(taken)} already exist(s); move them away or choose another KEEP", file=sys.stderr)
        sys.exit(2)
