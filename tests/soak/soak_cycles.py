"""Harness of the C5 soak test: ``python soak_cycles.py N CONFIG OVERRIDES...`` runs ``lzkernel run
CONFIG OVERRIDES -p lzk_soak_probe`` N times in this one process, each a ``--resume auto`` of the
one before (the first a fresh run), each stopped by the probe's SIGTERM at a random moment
(``LZK_SOAK_SIGTERM_AFTER_S``). After each it records what the process holds and what the run's
``summary.json`` says, and prints the list as one JSON line on stdout."""
from __future__ import annotations

import contextlib
import gc
import io
import json
import sys
import threading
from pathlib import Path

import psutil

from lzk_loop.skeleton import rss_mb
from lzk_soak_probe import open_fds, os_threads
from lzkernel.cli import main


def cycles(n: int, config: str, overrides: list[str]) -> list[dict[str, object]]:
    out_dir = next(Path(o.split("=", 1)[1]) for o in overrides if o.startswith("run.out_dir="))
    rows = []
    for i in range(n):
        argv = ["run", config, *overrides, "-p", "lzk_soak_probe", *(["--resume", "auto"] if i else [])]
        with contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
        gc.collect()
        summary = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
        rows.append({"rc": rc, "status": summary["status"], "train_iter": summary["train_iter"],
                     "env_steps": summary["env_steps"], "resumed_from": summary["resumed_from"],
                     "last_checkpoint": summary["last_checkpoint"], "fds": open_fds(),
                     "py_threads": threading.active_count(), "os_threads": os_threads(),
                     "children": len(psutil.Process().children(recursive=True)), "rss_mb": rss_mb()})
    return rows


if __name__ == "__main__":
    print(json.dumps(cycles(int(sys.argv[1]), sys.argv[2], sys.argv[3:])))
