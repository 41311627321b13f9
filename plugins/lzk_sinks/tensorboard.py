"""TensorBoard event files under ``<run dir>/tb`` through tensorboardX.

Every scalar is written twice: ``<namespace>/<name>`` against env steps, and
``by_iter/<namespace>/<name>`` against train iterations, so both x-axes are one click away.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from lzkernel import hookimpl

_writers: dict[int, Any] = {}


@hookimpl
def lzkernel_run_start(run: Any) -> None:
    if run.dir is None:
        return
    from tensorboardX import SummaryWriter

    _writers[id(run)] = SummaryWriter(logdir=str(run.dir / "tb"), flush_secs=10)


def _write(run: Any, metrics: Mapping[str, float]) -> None:
    writer = _writers.get(id(run))
    if writer is None:
        return
    for key, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            continue
        writer.add_scalar(key, value, global_step=run.env_steps)
        writer.add_scalar(f"by_iter/{key}", value, global_step=run.train_iter)


@hookimpl
def lzkernel_after_collect(run: Any, metrics: Mapping[str, float]) -> None:
    _write(run, metrics)


@hookimpl
def lzkernel_after_train(run: Any, metrics: Mapping[str, float]) -> None:
    _write(run, metrics)


@hookimpl
def lzkernel_after_eval(run: Any, metrics: Mapping[str, float]) -> None:
    _write(run, metrics)
    writer = _writers.get(id(run))
    if writer is not None:
        writer.flush()


@hookimpl
def lzkernel_run_end(run: Any, error: BaseException | None) -> None:
    writer = _writers.pop(id(run), None)
    if writer is not None:
        writer.close()
