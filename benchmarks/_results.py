"""Writing a benchmark's summary: JSON under benchmarks/results/ unless a path is given."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_results(summary: dict[str, Any], default_name: str, path: str | None = None) -> Path:
    """Write ``summary`` as indented JSON to ``path`` or ``benchmarks/results/<default_name>``;
    print and return the path."""
    out = Path(path) if path else Path(__file__).resolve().parent / "results" / default_name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    print(f"written {out}")
    return out
