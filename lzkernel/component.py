"""What a plugin provides: named components, each a factory plus a config schema, and what it
promises and asks of the components it runs with (checked before the run starts)."""
from __future__ import annotations

import dataclasses
import inspect
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from lzkernel.roles.table import ROLE_SPECS, ROLES

if TYPE_CHECKING:
    from lzkernel.config.compat import CheckContext
    from lzkernel.roles.policy import TargetSpec

__all__ = ["ROLES", "Component", "missing_members", "protocol_members"]


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

    def problems(self, role: str) -> list[str]:
        """What is wrong with this component as a ``role`` component, one phrase each (checked
        when a plugin registers it, so a mistake is named before any config is read): ``name``
        a non-empty string, ``factory`` callable as the role table calls it, ``config`` None or a
        dataclass whose field types resolve (nested option dataclasses too)."""
        out: list[str] = []
        if not isinstance(self.name, str) or not self.name:
            out.append(f"its name must be a non-empty string, got {self.name!r}")
        spec = ROLE_SPECS[role]
        if not callable(self.factory):
            out.append(f"factory must be callable as {spec.call_signature()}, got {type(self.factory).__name__}")
        else:
            try:
                signature = inspect.signature(self.factory)
            except (TypeError, ValueError):  # a builtin without a signature: nothing to check
                signature = None
            if signature is not None:
                try:
                    signature.bind(None, None, **{k: None for k in spec.kwarg_names})
                except TypeError as exc:
                    out.append(f"factory {_callable_name(self.factory)}{signature} cannot be called as "
                               f"{spec.call_signature()} ({exc})")
        if self.config is not None:
            out += _schema_problems(self.config)
        return out


def _callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _schema_problems(schema: Any, seen: frozenset[type] = frozenset()) -> list[str]:
    """Why ``schema`` cannot be a config schema (empty when it can)."""
    if not (isinstance(schema, type) and dataclasses.is_dataclass(schema)):
        what = f"class {schema.__name__}" if isinstance(schema, type) else type(schema).__name__
        return [f"config must be a dataclass (decorate it with @dataclasses.dataclass and declare each field "
                f"with lzkernel.option(default, doc=...)), got {what}"]
    try:
        hints = typing.get_type_hints(schema)
    except Exception as exc:  # noqa: BLE001 - a NameError from a string annotation, typically
        return [f"config {schema.__name__}: its field types cannot be resolved ({type(exc).__name__}: {exc}); "
                "import every type a field names at module level, not under TYPE_CHECKING"]
    out: list[str] = []
    for f in dataclasses.fields(schema):
        tp = hints.get(f.name)
        if isinstance(tp, type) and dataclasses.is_dataclass(tp) and tp not in seen:
            out += _schema_problems(tp, seen | {schema})
    return out


def protocol_members(proto: type) -> list[str]:
    """The public members a Protocol declares, its base Protocols' included (methods, properties
    and annotated attributes), sorted."""
    members: set[str] = set()
    for cls in proto.__mro__:
        if cls is object or not getattr(cls, "_is_protocol", False) or cls is typing.Protocol:
            continue
        members.update(vars(cls))
        members.update(getattr(cls, "__annotations__", {}))
    return sorted(m for m in members if not m.startswith("_") and m != "register")


def missing_members(obj: Any, proto: type) -> list[str]:
    """The members of Protocol ``proto`` that ``obj`` lacks (empty: it implements it). A member
    found on the object or its class is never evaluated (a property is not called); anything
    else is looked up as ``isinstance`` with a runtime-checkable Protocol does."""
    missing = []
    for name in protocol_members(proto):
        try:
            inspect.getattr_static(obj, name)
        except AttributeError:
            if not hasattr(obj, name):  # __getattr__ proxies
                missing.append(name)
    return missing
