"""Plugin entry modules register their components without importing torch, gymnasium or pyspiel."""
from __future__ import annotations

import subprocess
import sys

from lzk_envs.plugin import AtariEnvConfig, GymEnvConfig, OpenSpielEnvConfig, lzkernel_register_envs
from lzk_workers.plugin import (
    EpisodeCollectorConfig,
    EpisodeEvaluatorConfig,
    SegmentCollectorConfig,
    VersusCollectorConfig,
    VersusEvaluatorConfig,
    lzkernel_register_collectors,
    lzkernel_register_evaluators,
)


def test_plugin_modules_import_no_heavy_packages() -> None:
    code = (
        "import sys, lzk_envs.plugin, lzk_workers.plugin, lzk_schedule.plugin, lzk_comm.plugin\n"
        "for m in (lzk_envs.plugin, lzk_workers.plugin, lzk_schedule.plugin, lzk_comm.plugin):\n"
        "    [h() for n, h in vars(m).items() if n.startswith('lzkernel_register_')]\n"
        "print(sorted(m for m in ('torch', 'gymnasium', 'pyspiel') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_registrations() -> None:
    envs = {c.name: c.config for c in lzkernel_register_envs()}
    cols = {c.name: c.config for c in lzkernel_register_collectors()}
    evs = {c.name: c.config for c in lzkernel_register_evaluators()}
    assert envs == {"gymnasium": GymEnvConfig, "openspiel": OpenSpielEnvConfig, "atari": AtariEnvConfig}
    assert cols == {"episode": EpisodeCollectorConfig, "segment": SegmentCollectorConfig,
                    "versus": VersusCollectorConfig}
    assert evs == {"episodes": EpisodeEvaluatorConfig, "versus": VersusEvaluatorConfig}
    assert {"episodes", "stop_value"} <= set(EpisodeEvaluatorConfig.__dataclass_fields__)
    assert {"games", "opponents", "stop_value", "every_train_iters"} <= set(VersusEvaluatorConfig.__dataclass_fields__)
