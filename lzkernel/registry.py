"""The typed component registry: role → name → :class:`Component`, with provenance."""
from __future__ import annotations

from typing import Any, Iterable

import dataclasses

from lzkernel.component import Component
from lzkernel.config.schema import suggest
from lzkernel.errors import ConfigError, PluginError
from lzkernel.roles.table import ROLE_TABLE, ROLES

#: Registration hook of each role (from the role table).
REGISTRATION_HOOKS: dict[str, str] = {r.name: r.hook for r in ROLE_TABLE}


class Registry:
    """Components by role and name. Two plugins registering one name is an error naming both."""

    def __init__(self) -> None:
        self._components: dict[str, dict[str, Component]] = {role: {} for role in ROLES}

    def add(self, role: str, component: Component, plugin: str) -> None:
        if role not in self._components:
            raise PluginError(f"plugin '{plugin}' registered a component for unknown role '{role}'")
        if not isinstance(component, Component):
            raise PluginError(
                f"plugin '{plugin}' returned {type(component).__name__} from "
                f"{REGISTRATION_HOOKS[role]}; expected lzkernel.Component"
            )
        existing = self._components[role].get(component.name)
        if existing is not None:
            raise PluginError(
                f"{role} '{component.name}' is registered twice: by plugin '{existing.plugin}' "
                f"and by plugin '{plugin}'; block one of them with -p no:NAME"
            )
        self._components[role][component.name] = dataclasses.replace(component, plugin=plugin)

    def get(self, role: str, name: str) -> Component:
        """The component, or a :class:`ConfigError` listing the available names."""
        table = self._components[role]
        if name in table:
            return table[name]
        available = ", ".join(sorted(table)) or "(none registered)"
        raise ConfigError(f"unknown {role} '{name}'; available: {available}{suggest(name, table)}")

    def names(self, role: str) -> list[str]:
        return sorted(self._components[role])

    def items(self) -> Iterable[tuple[str, Component]]:
        for role in ROLES:
            for name in sorted(self._components[role]):
                yield role, self._components[role][name]

    def by_plugin(self) -> dict[str, dict[str, list[str]]]:
        """plugin name → role → component names."""
        out: dict[str, dict[str, list[str]]] = {}
        for role, comp in self.items():
            out.setdefault(comp.plugin, {}).setdefault(role, []).append(comp.name)
        return out

    @classmethod
    def collect(cls, pm: Any) -> Registry:
        """Call every registration hook implementation one at a time, recording provenance."""
        registry = cls()
        for role, hook_name in REGISTRATION_HOOKS.items():
            hook = getattr(pm.hook, hook_name)
            for impl in hook.get_hookimpls():
                try:
                    result = impl.function()
                except Exception as exc:  # a plugin's bug must name the plugin
                    raise PluginError(f"plugin '{impl.plugin_name}' failed in {hook_name}: {exc!r}") from exc
                if result is None:
                    continue
                if not isinstance(result, (list, tuple)):
                    raise PluginError(
                        f"plugin '{impl.plugin_name}': {hook_name} must return a list of Components, "
                        f"got {type(result).__name__}"
                    )
                for component in result:
                    registry.add(role, component, impl.plugin_name)
        return registry
