"""Config options every search-based policy shares: the visit temperature, the search constants
and the learning geometry. Policies' config schemas subclass :class:`SearchPolicyOptions` and
add their model and learner options.

This module imports no torch: the kernel imports schemas to validate configs and print docs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lzkernel import TargetSpec, option


@dataclass
class VisitTemperatureOptions:
    """The collection visit-count temperature of the MuZero-family policies (SPEC §1.4)."""

    manual_temperature_decay: bool = option(
        False, doc="Visit temperature 1.0 → 0.5 → 0.25 at 0.5 and 0.75 of the threshold.")
    fixed_temperature_value: float = option(0.25, doc="Visit temperature when not decaying.",
                                            min=0.0, min_exclusive=True)
    threshold_training_steps_for_final_temperature: float = option(
        1e5, doc="Learner steps at which the manual decay reaches 0.25.", min=1.0)

    def temperature(self, train_iter: int) -> float:
        """LightZero's temperature after ``train_iter`` learner steps: the fixed value, or with
        manual decay 1.0 before 0.5·threshold steps, 0.5 before 0.75·threshold, then 0.25."""
        if not self.manual_temperature_decay:
            return float(self.fixed_temperature_value)
        threshold = self.threshold_training_steps_for_final_temperature
        if train_iter < 0.5 * threshold:
            return 1.0
        if train_iter < 0.75 * threshold:
            return 0.5
        return 0.25


@dataclass
class SearchOptions(VisitTemperatureOptions):
    """The MCTS constants (SPEC §2.3) and where the search runs."""

    num_simulations: int = option(25, doc="MCTS simulations per move (collect, reanalyse).", min=1)
    eval_num_simulations: int | None = option(
        None, doc="Simulations per move in eval mode (default: num_simulations).", min=1)
    discount: float = option(0.997, doc="Discount γ used in search backups.", min=0.0, max=1.0)
    pb_c_base: float = option(19652.0, doc="pUCT c2.", min=0.0, min_exclusive=True)
    pb_c_init: float = option(1.25, doc="pUCT c1.", min=0.0)
    dirichlet_alpha: float = option(0.3, doc="Root Dirichlet noise α.", min=0.0, min_exclusive=True)
    noise_fraction: float = option(0.25, doc="Root prior mixing weight of the noise.", min=0.0, max=1.0)
    value_delta_max: float = option(0.01, doc="Floor on the min-max span in value normalisation.", min=0.0)
    reanalyze_noise: bool = option(True, doc="Add root Dirichlet noise in reanalyse searches.")
    search_threads: int = option(
        1, doc="torch intra-op threads while acting and searching (restored afterwards); 0 leaves "
        "the process setting. Search batches are small matmuls: one thread is fastest, and a "
        "second thread on shared cores can make a search several times slower.", min=0)

    @property
    def eval_simulations(self) -> int:
        """Simulations per eval move."""
        return self.eval_num_simulations if self.eval_num_simulations is not None else self.num_simulations

    def search_config(self, num_simulations: int, **extra: Any) -> Any:
        """The ``lzk_mcts.SearchConfig`` of a search with ``num_simulations`` (``extra``: the
        search options these options do not set, e.g. ``value_normalization``)."""
        from lzk_mcts import SearchConfig

        return SearchConfig(num_simulations=num_simulations, discount=self.discount, pb_c_base=self.pb_c_base,
                            pb_c_init=self.pb_c_init, dirichlet_alpha=self.dirichlet_alpha,
                            noise_fraction=self.noise_fraction, value_delta_max=self.value_delta_max, **extra)


@dataclass
class SearchPolicyOptions(SearchOptions):
    """Search options plus the learning geometry that the replay buffer is built from."""

    frame_stack: int = option(1, doc="Observations stacked along the first axis (model input).", min=1)
    unroll_steps: int = option(5, doc="K: recurrent steps unrolled in the loss.", min=1)
    td_steps: int = option(5, doc="n of the n-step value targets (used by the buffer).", min=1)
    batch_size: int = option(256, doc="Learner batch size.", min=1)

    def target_spec(self) -> TargetSpec:
        """The :class:`lzkernel.TargetSpec` these options imply (γ of the targets = the search's)."""
        return TargetSpec(unroll_steps=self.unroll_steps, td_steps=self.td_steps, discount=self.discount,
                          frame_stack=self.frame_stack, batch_size=self.batch_size)

    def exploration(self, train_iter: int, env_steps: int) -> tuple[float, float]:
        """(visit temperature, ε) of collection; ε is 0 unless a subclass schedules it."""
        return self.temperature(train_iter), 0.0
