"""What a plugin provides: named components, each a factory plus a config schema."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

#: The roles a component can play, in the order config sections are validated.
ROLES: tuple[str, ...] = (
    "trainer",
    "env",
    "policy",
    "buffer",
    "collector",
    "evaluator",
    "update_schedule",
    "comm",
)


@dataclass(frozen=True)
class Component:
    """A named implementation of one role.

    ``factory(cfg, run, **kwargs)`` builds the component: ``cfg`` is an instance of ``config``
    (already validated), ``run`` the :class:`~lzkernel.run.RunContext`, ``kwargs`` whatever the
    caller of ``run.build(role, **kwargs)`` passes (an env spec for a policy, say). Factories import
    heavy modules (torch, gymnasium) inside their body so that ``lzkernel plugins`` stays fast.

    ``config`` is a dataclass whose fields are declared with :func:`lzkernel.option` (each with a
    ``doc``); ``None`` means the component takes no options besides ``name``.
    """

    name: str
    factory: Callable[..., Any]
    config: type | None = None
    doc: str = ""
    # Filled in by the registry: the plugin that registered this component.
    plugin: str = field(default="", compare=False)
