"""The hooks of lzkernel (pluggy project ``lzkernel``).

Three kinds:

* **Registration hooks** (``lzkernel_register_<role>s``), one per role. Called once per plugin at
  start-up, on every rank, before the config is validated. Each returns a list of
  :class:`~lzkernel.Component`. The kernel calls the implementations one at a time so that it
  knows which plugin provided which name; two plugins registering the same name in the same role
  is an error that names both.
* **Command hook** ``lzkernel_add_commands``: plugins add ``lzkernel`` subcommands.
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

from typing import TYPE_CHECKING, Any, Callable, Mapping

import pluggy

from lzkernel.roles.table import ROLE_TABLE, RoleSpec

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


# The hooks are made from the role table (lzkernel.roles.table.ROLE_TABLE): one per role, named
# ``lzkernel_register_<role>s`` (e.g. ``lzkernel_register_policies``), its docstring saying what
# the role's factories are called with and must return.


def _registration_hookspec(role: RoleSpec) -> Callable[[], list[Component]]:
    def spec() -> list[Component]: ...

    spec.__name__ = spec.__qualname__ = role.hook
    spec.__doc__ = role.hook_doc()
    return hookspec(spec)


for _role in ROLE_TABLE:
    globals()[_role.hook] = _registration_hookspec(_role)
del _role


# ---------------------------------------------------------------------------------------------
# Events: every implementation runs; return values are ignored.
# ---------------------------------------------------------------------------------------------


@hookspec
def lzkernel_configure(config: Mapping[str, Any]) -> None:
    """The config has been validated (``config`` is the resolved plain mapping). Every rank,
    once, before the run directory exists; called by ``lzkernel run`` only (``lzkernel config``
    and ``eval`` do not), so a rule every command must apply belongs in the schema's
    ``validate()``. Raise :class:`~lzkernel.ConfigError` to reject it."""


@hookspec
def lzkernel_add_commands(subparsers: Any) -> None:
    """Add ``lzkernel`` subcommands: ``p = subparsers.add_parser("name", help=...)``, its
    arguments, then ``p.set_defaults(lzkernel_command=function)``; ``lzkernel name ...`` calls
    ``function(args)`` and exits with what it returns (an int; None is 0). Called when the command
    line names a command that is not built in, and for ``lzkernel --help``. A name that is built
    in, or that another plugin added, is an error naming the plugin (exit 2)."""


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
    """An evaluation finished. ``metrics`` hold at least ``eval/return_mean`` (episode evaluators
    add ``eval/return_std``/``_min``/``_max`` and ``eval/episodes``; two-player evaluators their
    win/draw/loss rates). Rank 0 only."""


@hookspec
def lzkernel_checkpoint_saved(run: RunContext, path: Path) -> None:
    """A checkpoint directory has been committed (``DONE`` written). Rank 0 only."""


@hookspec
def lzkernel_run_end(run: RunContext, error: BaseException | None) -> None:
    """The run is over: ``error`` is None on success, else the exception that ended it
    (including :class:`KeyboardInterrupt`). Every rank; sinks flush and close here."""
