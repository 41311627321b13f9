"""``lzkernel config CONFIG --explain``: every key of the components a config names."""
from __future__ import annotations

import sys
from typing import Sequence

from lzkernel.registry import Registry


def explain(config: str, overrides: Sequence[str], registry: Registry) -> None:
    """Print every key of the components the config names, with type, default and doc. Read from
    the sections' ``name`` alone, so that it also explains a config that does not validate yet (a
    required key missing, a wrong value): the listing first, then the problems (ConfigError, exit 2)."""
    from lzkernel.component import ROLES
    from lzkernel.config.loader import DEFAULT_SECTIONS, apply_overrides, load_config, load_tree
    from lzkernel.config.run_config import RunConfig
    from lzkernel.config.schema import REQUIRED, describe

    tree, _ = apply_overrides(load_tree(config)[0], overrides)
    rows = describe(RunConfig, "run")
    for role in ROLES:
        section = tree.get(role, DEFAULT_SECTIONS.get(role))
        if not isinstance(section, dict):
            continue
        name = section.get("name")
        # the section's component, chosen among the registered ones (`lzkernel plugins` says whose)
        rows.append((f"{role}.name", "str", name if isinstance(name, str) else REQUIRED,
                     f"One of: {', '.join(registry.names(role))}."))
        component = registry.find(role, name) if isinstance(name, str) else None
        if component is not None and component.config is not None:
            rows += describe(component.config, role)
    width = max(len(r[0]) for r in rows)
    for key, tp, default, doc in rows:
        print(f"{key:<{width}}  {tp:<12} {default!r:<14} {doc}")
    sys.stdout.flush()
    load_config(config, overrides, registry)  # what is wrong with it, if anything: exit 2
