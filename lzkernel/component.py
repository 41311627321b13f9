"""What a plugin provides: named components, each a factory plus a config schema, and what it
promises and asks of the components it runs with (checked before the run starts)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from lzkernel.roles.table import ROLES

if TYPE_CHECKING:
    from lzkernel.config.compat import CheckContext
    from lzkernel.roles.policy import TargetSpec

__all__ = ["ROLES", "Component"]


@dataclass(frozen=True)
class Component:
    """A named implementation of one role.

    ``factory(cfg, run, **kwargs)`` builds the component: ``cfg`` is an instance of ``config``
    (already validated), ``run`` the :class:`~lzkernel.run.RunContext`, ``kwargs`` exactly the
    keyword arguments the role table gives for the role (an env spec for a policy, say; see
    :data:`lzkernel.ROLE_TABLE`). Factories import heavy modules (torch, gymnasium) inside their
    body so that ``lzkernel plugins`` stays fast.

    ``config`` is a dataclass whose fields are declared with :func:`lzkernel.option` (each with a
    ``doc``); ``None`` means the component takes no options besides ``name``.

    Compatibility, checked by ``lzkernel config`` and before ``lzkernel run`` builds anything:

    * ``provides``: Protocols the built object implements besides its role's (e.g. a policy's
      :class:`~lzkernel.ObservationValues`, a buffer's :class:`~lzkernel.ReanalysableBuffer`);
    * ``needs``: per other role, the Protocols its component must provide;
    * ``check(ctx)``: cross-section rules (e.g. "collector.segment_length equals
      buffer.segment_length"); returns problems as ``"key: message"`` strings;
    * ``target_spec(cfg)``: policies only, the :class:`~lzkernel.TargetSpec` their options imply
      (what ``policy.target_spec`` will be), so that other components' checks can use it.

    ``resume_safe``: keys of this component's section (relative to it, dotted for nested ones;
    a key covers everything below it) that a resume may change: what does not shape the state a
    checkpoint holds, e.g. an evaluator's ``every_train_iters``. Every other change to the
    section is refused on resume (:mod:`lzkernel.config.resume_check`).
    """

    name: str
    factory: Callable[..., Any]
    config: type | None = None
    doc: str = ""
    provides: tuple[type, ...] = ()
    needs: Mapping[str, tuple[type, ...]] = field(default_factory=dict)
    check: Callable[[CheckContext], list[str]] | None = field(default=None, compare=False)
    target_spec: Callable[[Any], TargetSpec] | None = field(default=None, compare=False)
    resume_safe: tuple[str, ...] = ()
    # Filled in by the registry: the plugin that registered this component.
    plugin: str = field(default="", compare=False)
