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
    """Components by role and name. Two plugins registering one name is an error naming both.

    A registry made with ``problems=[]`` records each mistake of a plugin there as ``(plugin,
    message)`` and goes on without that component (what ``lzkernel plugins`` lists); otherwise
    the first mistake raises :class:`PluginError`.
    """

    def __init__(self, problems: list[tuple[str, str]] | None = None) -> None:
        self._components: dict[str, dict[str, Component]] = {role: {} for role in ROLES}
        self.problems = problems

    def _fail(self, plugin: str, message: str) -> None:
        if self.problems is None:
            raise PluginError(message)
        self.problems.append((plugin, message))

    def add(self, role: str, component: Component, plugin: str) -> None:
        if role not in self._components:
            return self._fail(plugin, f"plugin '{plugin}' registered a component for unknown role '{role}'")
        if not isinstance(component, Component):
            return self._fail(plugin, f"plugin '{plugin}' returned {type(component).__name__} from "
                                      f"{REGISTRATION_HOOKS[role]}; expected lzkernel.Component")
        wrong = component.problems(role)
        if wrong:
            return self._fail(plugin, f"plugin '{plugin}': {role} '{component.name}': {'; '.join(wrong)}")
        existing = self._components[role].get(component.name)
        if existing is not None:
            return self._fail(plugin, f"{role} '{component.name}' is registered twice: by plugin '{existing.plugin}' "
                                      f"and by plugin '{plugin}'; block one of them with -p no:{existing.plugin} "
                                      f"or -p no:{plugin}")
        self._components[role][component.name] = dataclasses.replace(component, plugin=plugin)
        return None

    def get(self, role: str, name: str) -> Component:
        """The component, or a :class:`ConfigError` listing the available names."""
        table = self._components[role]
        if name in table:
            return table[name]
        available = ", ".join(sorted(table)) or "(none registered)"
        raise ConfigError(f"unknown {role} '{name}'; available: {available}{suggest(name, table)}")

    def find(self, role: str, name: str) -> Component | None:
        """The component, or None."""
        return self._components[role].get(name)

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
    def collect(cls, pm: Any, problems: list[tuple[str, str]] | None = None) -> Registry:
        """Call every registration hook implementation one at a time, recording provenance
        (``problems``: see the class docstring)."""
        registry = cls(problems)
        for role, hook_name in REGISTRATION_HOOKS.items():
            hook = getattr(pm.hook, hook_name)
            for impl in hook.get_hookimpls():
                try:
                    result = impl.function()
                except Exception as exc:  # a plugin's bug must name the plugin
                    if problems is None:
                        raise PluginError(f"plugin '{impl.plugin_name}' failed in {hook_name}: {exc!r}") from exc
                    problems.append((impl.plugin_name, f"plugin '{impl.plugin_name}' failed in {hook_name}: {exc!r}"))
                    continue
                if result is None:
                    continue
                if not isinstance(result, (list, tuple)):
                    registry._fail(impl.plugin_name, f"plugin '{impl.plugin_name}': {hook_name} must return a list "
                                                     f"of Components, got {type(result).__name__}")
                    continue
                for component in result:
                    registry.add(role, component, impl.plugin_name)
        return registry
