"""The hooks of lzkernel (pluggy project ``lzkernel``).

Two kinds:

* **Registration hooks** (``lzkernel_register_<role>s``), one per role. Called once per plugin at
  start-up, on every rank, before the config is validated. Each returns a list of
  :class:`~lzkernel.Component`. The kernel calls the implementations one at a time so that it
  knows which plugin provided which name; two plugins registering the same name in the same role
  is an error that names both.
* **Event hooks** for observers (metric sinks, profilers, a third party's experiment tracker).
  Called by trainers at fixed points of the loop; every implementation runs, and return values
  are ignored. Metric events are called on rank 0 only; ``lzkernel_configure`` and
  ``lzkernel_run_start``/``lzkernel_run_end`` on every rank (check ``run.is_main`` to write
  files).

Implement a hook with ``@lzkernel.hookimpl`` on a module-level function (or a method of a
module-level instance) whose name is the hook's name; implementations may take fewer arguments
than the spec lists.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import pluggy

if TYPE_CHECKING:
    from pathlib import Path

    from lzkernel.component import Component
    from lzkernel.run import RunContext

PROJECT = "lzkernel"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# ---------------------------------------------------------------------------------------------
# Registration: one hook per role. Called at start-up on every rank; return a list of Components.
# ---------------------------------------------------------------------------------------------


@hookspec
def lzkernel_register_trainers() -> list[Component]:
    """Trainers: the orchestrator loop of one algorithm family (config section ``trainer``).

    The factory is called as ``factory(cfg, run)`` and returns an object with
    ``train() -> None`` plus ``state_dict()``/``load_state_dict(state)`` for checkpoints.
    """


@hookspec
def lzkernel_register_envs() -> list[Component]:
    """Environments (section ``env``): factory ``factory(cfg, run)`` returns an env spec that can
    create vectorised envs and reports observation shape and action count."""


@hookspec
def lzkernel_register_policies() -> list[Component]:
    """Policies (section ``policy``): one model, three modes (collect, eval, learn).

    Factory: ``factory(cfg, run, env_spec=...)``.
    """


@hookspec
def lzkernel_register_buffers() -> list[Component]:
    """Replay buffers (section ``buffer``). Factory: ``factory(cfg, run, **algorithm_kwargs)``."""


@hookspec
def lzkernel_register_collectors() -> list[Component]:
    """Collectors (section ``collector``): step vectorised envs with a policy, return data.

    Factory: ``factory(cfg, run, env_spec=..., policy=...)``.
    """


@hookspec
def lzkernel_register_evaluators() -> list[Component]:
    """Evaluators (section ``evaluator``): play N greedy episodes, report returns, decide stop.

    Factory: ``factory(cfg, run, env_spec=..., policy=...)``.
    """


@hookspec
def lzkernel_register_update_schedules() -> list[Component]:
    """Update schedules (section ``update_schedule``): learner updates per collect.

    Factory: ``factory(cfg, run)`` returns an object with
    ``updates(collected_transitions: int) -> int``, identical on every rank.
    """


@hookspec
def lzkernel_register_comm_backends() -> list[Component]:
    """Communication backends (section ``comm``): rank, world size and collectives.

    Factory: ``factory(cfg, run)`` returns a :class:`~lzkernel.comm.CommBackend`. Built first,
    before any other component, on every rank.
    """


# ---------------------------------------------------------------------------------------------
# Events: every implementation runs; return values are ignored.
# ---------------------------------------------------------------------------------------------


@hookspec
def lzkernel_configure(config: Mapping[str, Any]) -> None:
    """The config has been validated (``config`` is the resolved plain mapping). Every rank,
    once, before the run directory exists. Raise :class:`~lzkernel.ConfigError` to reject it."""


@hookspec
def lzkernel_run_start(run: RunContext) -> None:
    """The run context is ready (run directory created on rank 0, comm backend up). Every rank."""


@hookspec
def lzkernel_after_collect(run: RunContext, metrics: Mapping[str, float]) -> None:
    """A collection finished. ``metrics`` are namespaced ``collect/...`` scalars. Rank 0 only.
    ``run.train_iter`` and ``run.env_steps`` give the x-axes."""


@hookspec
def lzkernel_after_train(run: RunContext, metrics: Mapping[str, float]) -> None:
    """A logging period of training finished. ``metrics`` are ``train/...`` (and ``search/...``,
    ``buffer/...``) scalars averaged over the period. Rank 0 only."""


@hookspec
def lzkernel_after_eval(run: RunContext, metrics: Mapping[str, float]) -> None:
    """An evaluation finished. ``metrics`` hold ``eval/return_mean``, ``eval/return_std``,
    ``eval/return_min``, ``eval/return_max`` and ``eval/episodes``. Rank 0 only."""


@hookspec
def lzkernel_checkpoint_saved(run: RunContext, path: Path) -> None:
    """A checkpoint directory has been committed (``DONE`` written). Rank 0 only."""


@hookspec
def lzkernel_run_end(run: RunContext, error: BaseException | None) -> None:
    """The run is over: ``error`` is None on success, else the exception that ended it
    (including :class:`KeyboardInterrupt`). Every rank; sinks flush and close here."""
