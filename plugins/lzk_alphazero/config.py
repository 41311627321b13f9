"""Config schema of the ``alphazero`` policy (section ``policy: {name: alphazero, ...}``).

Defaults are LightZero's tic-tac-toe AlphaZero (SPEC §6): a residual conv net with one block of
16 channels and heads of hidden size 8, 25 simulations per move (in evaluation LightZero's
min(800, 4 × that): 100), batch 256, Adam 3e-3, gradient clip 0.5, value loss weight 1, entropy
weight 0, Dirichlet α 0.3 with fraction 0.25. No torch here: ``lzkernel config`` reads this schema
without importing the model.
"""
from __future__ import annotations

from dataclasses import dataclass

from lzk_common.options import SearchOptions
from lzkernel import TargetSpec, option


@dataclass
class AlphaZeroModelConfig:
    """The policy-value network."""

    type: str = option("conv", doc="'conv' (residual tower for board planes [C, H, W]) or 'mlp' (vectors).",
                       choices=("conv", "mlp"))
    channels: int = option(16, doc="Conv: channels of the residual tower.", min=1)
    num_res_blocks: int = option(1, doc="Conv: residual blocks in the tower.", min=0)
    policy_head_channels: int = option(16, doc="Conv: channels of the policy head's 1x1 convolution.", min=1)
    value_head_channels: int = option(16, doc="Conv: channels of the value head's 1x1 convolution (one channel, "
                                      "AlphaGo Zero's, leaves a 3x3 board's value head 9 features: too few to "
                                      "value tic-tac-toe positions well).", min=1)
    mlp_hidden: list[int] = option([128, 128], doc="MLP: hidden sizes of the trunk (LayerNorm, ReLU).")
    policy_head_hidden: list[int] = option([8], doc="Hidden sizes of the policy head's MLP.")
    value_head_hidden: list[int] = option([8], doc="Hidden sizes of the value head's MLP.")

    def validate(self) -> list[tuple[str, str]]:
        bad = [n for n in ("mlp_hidden", "policy_head_hidden", "value_head_hidden") if any(h <= 0 for h in getattr(self, n))]
        return [(n, "hidden sizes must be positive") for n in bad]


@dataclass
class AlphaZeroPolicyConfig(SearchOptions):
    """AlphaZero policy: network, simulator-driven search, acting, learner. Of the inherited
    search options, ``value_delta_max`` and ``reanalyze_noise`` are unused (no min-max
    normalisation, no reanalysis); ``fixed_temperature_value`` is the temperature of sampled moves."""

    model: AlphaZeroModelConfig = option(default_factory=AlphaZeroModelConfig, doc="The network.")
    # --- search and acting --------------------------------------------------------------------
    eval_num_simulations: int | None = option(
        None, doc="Simulations per move in eval mode (default: LightZero's min(800, 4 * num_simulations), "
        "100 at 25).", min=1)
    discount: float = option(1.0, doc="γ of the search's backups and of the outcome targets (1: board games).",
                             min=0.0, max=1.0)
    fixed_temperature_value: float = option(1.0, doc="Temperature of the moves sampled from the visits "
                                            "(the paper's τ = 1).", min=0.0, min_exclusive=True)
    sample_moves: int = option(
        30, doc="Collection samples a game's first this many moves in proportion to visits^(1/τ) and plays "
        "the most visited move after (the paper: 30 moves in chess, τ → 0 after).", min=0)
    # --- learner ------------------------------------------------------------------------------
    augment_symmetries: bool = option(
        True, doc="Train on a random symmetry (rotation or reflection of the board) of each sampled position, "
        "where the env declares its game's symmetries (tic-tac-toe, go, connect four): AlphaGo Zero's "
        "augmentation; the AlphaZero paper trains without it.")
    batch_size: int = option(256, doc="Learner batch size (positions).", min=1)
    optimizer: str = option("adam", doc="'adam' (L2 weight decay), 'adamw' (decoupled decay on weights only) or "
                            "'sgd' (momentum 0.9).", choices=("adam", "adamw", "sgd"))
    lr: float = option(3e-3, doc="Learning rate.", min=0.0, min_exclusive=True)
    weight_decay: float = option(1e-4, doc="Weight decay (the paper's L2 term c·‖θ‖²).", min=0.0)
    grad_clip: float = option(0.5, doc="Max global gradient norm.", min=0.0, min_exclusive=True)
    value_loss_weight: float = option(1.0, doc="Weight of the value MSE to the game outcome.", min=0.0)
    entropy_loss_weight: float = option(0.0, doc="Weight of −H(π) (an entropy bonus; 0 in the paper).", min=0.0)
    on_nonfinite: str = option("raise", doc="A non-finite loss or gradient norm: 'raise', or 'skip' the step.",
                               choices=("raise", "skip"))

    @property
    def eval_simulations(self) -> int:
        """Simulations per eval move: ``eval_num_simulations``, else LightZero's AlphaZero rule
        min(800, 4·num_simulations) (SPEC §5.2)."""
        if self.eval_num_simulations is not None:
            return self.eval_num_simulations
        return min(800, 4 * self.num_simulations)

    def validate(self) -> list[tuple[str, str]]:
        return [(f"model.{f}", m) for f, m in self.model.validate()]

    def target_spec(self) -> TargetSpec:
        """Single positions (K = 0, one frame), outcome values discounted by ``discount``."""
        return TargetSpec(unroll_steps=0, td_steps=1, discount=self.discount, frame_stack=1,
                          batch_size=self.batch_size)

    def exploration(self, train_iter: int, env_steps: int) -> tuple[float, float]:
        """(temperature of sampled moves, ε = 0)."""
        return self.temperature(train_iter), 0.0
