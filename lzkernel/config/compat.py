"""Whether the components a config names can work together, checked before anything is built.

Each component declares what it ``provides`` (Protocols its object implements besides its
role's) and what it ``needs`` of the other roles' components, plus an optional ``check`` for
rules across sections (see :class:`lzkernel.Component`). :func:`check_compatibility` runs them
all on a resolved config; ``lzkernel config`` and ``lzkernel run`` report the problems and exit 2.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from lzkernel.component import Component
    from lzkernel.config.loader import ResolvedConfig
    from lzkernel.registry import Registry
    from lzkernel.roles.policy import TargetSpec


@runtime_checkable
class BufferOptions(Protocol):
    """What other components' checks may read of a buffer section's options."""

    capacity: int


@runtime_checkable
class SegmentBufferOptions(BufferOptions, Protocol):
    """Options of buffers that store fixed-length game segments."""

    segment_length: int


@dataclass
class CheckContext:
    """What a component's ``check`` sees: the resolved config and the chosen components."""

    config: ResolvedConfig
    components: dict[str, Component]

    def options(self, role: str) -> Any:
        """The validated options of ``role``'s section (None when absent or option-less)."""
        return self.config.section(role)

    def name(self, role: str) -> str | None:
        return self.config.name(role)

    @property
    def target_spec(self) -> TargetSpec | None:
        """The policy's target spec as its component declares it (None if it does not)."""
        policy = self.components.get("policy")
        if policy is None or policy.target_spec is None:
            return None
        return policy.target_spec(self.options("policy"))


def protocol_summary(proto: type) -> str:
    """``Name (member, member)``: a Protocol and the members it declares, for messages."""
    members = [m for m in vars(proto) if not m.startswith("_")]
    members += list(getattr(proto, "__annotations__", {}))
    members = sorted(set(members) - {"register"})
    return f"{proto.__name__} ({', '.join(members)})" if members else proto.__name__


def _provides(component: Component, proto: type) -> bool:
    return any(proto in p.__mro__ for p in component.provides)


def check_compatibility(config: ResolvedConfig, registry: Registry) -> list[str]:
    """Every problem with how the config's components fit together, as one line each."""
    components = {role: registry.get(role, name) for role, (name, _) in config.sections.items()}
    problems: list[str] = []
    for role, comp in components.items():
        for other, protocols in comp.needs.items():
            peer = components.get(other)
            wanted = ", ".join(protocol_summary(p) for p in protocols)
            if peer is None:
                problems.append(f"{role} '{comp.name}' needs a {other} section providing {wanted}")
                continue
            missing = [p for p in protocols if not _provides(peer, p)]
            if missing:
                has = ", ".join(p.__name__ for p in peer.provides) or "none of these"
                problems.append(
                    f"{role} '{comp.name}' needs {'an' if other[0] in 'aeiou' else 'a'} {other} that provides "
                    f"{', '.join(protocol_summary(p) for p in missing)}; {other} '{peer.name}' provides {has}")
    ctx = CheckContext(config, components)
    for role, comp in components.items():
        if comp.check is not None:
            problems += [f"{role} '{comp.name}': {p}" for p in comp.check(ctx)]
    return problems
