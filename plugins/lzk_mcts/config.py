"""Search hyper-parameters and the search result container."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class SearchConfig:
    """Hyper-parameters of one batched search (SPEC §2.3 names in brackets).

    Policies build one from their own config sections; this is a plain dataclass, not a
    kernel config schema, because ``lzk_mcts`` registers no components.
    """

    num_simulations: int = 25  # S: simulations per root; the tree holds N = S + 1 nodes
    discount: float = 0.997  # γ used in Q = r + γ·v and in backup
    pb_c_base: float = 19652.0  # c2 of the pUCT exploration term
    pb_c_init: float = 1.25  # c1 of the pUCT exploration term
    dirichlet_alpha: float = 0.3  # α of the root Dirichlet noise [root_dirichlet_alpha]
    noise_fraction: float = 0.25  # f in p ← (1 − f)·p + f·η [root_noise_weight]
    value_delta_max: float = 0.01  # floor on the min-max span used by normalisation
    #: "minmax": Q normalised by the tree's min-max statistics and clipped to [0, 1] (MuZero,
    #: values of any scale); "none": the raw Q (AlphaZero, values in [−1, 1]).
    value_normalization: str = "minmax"
    #: What an unvisited child scores with: "parent_mean" (LightZero's MuZero mean Q of the
    #: parent's visited children) or "zero" (AlphaZero).
    unvisited_value: str = "parent_mean"
    #: N of the exploration term c(N)·√N/(1 + n) below the root: "children" (the sum of the
    #: node's children's visits, LightZero's MuZero: 0 on the first descent below a new node,
    #: where the priors then play no part) or "node" (the node's own visit count, which counts its
    #: expansion: LightZero's AlphaZero and the AlphaZero pseudocode). At the root both are the
    #: children's sum (LightZero's AlphaZero does not count the root's expansion either).
    parent_visits: str = "children"
    #: "puct": LightZero's pUCT search with root Dirichlet noise; "gumbel": Gumbel MuZero
    #: (:mod:`lzk_mcts.gumbel`: Sequential Halving at the root, the improved policy as target).
    algorithm: str = "puct"
    gumbel_max_considered: int = 16  # m: actions sampled without replacement at the root
    gumbel_maxvisit_init: float = 50.0  # c_visit of σ(q̂) = (c_visit + max N)·c_scale·q̂
    gumbel_value_scale: float = 0.1  # c_scale of σ
    #: What q̂ rescales the completed Qs by: "node" (min and max of the node's children's completed
    #: Qs, mctx's; legal actions only) or "tree" (those widened by the tree's min-max statistics).
    gumbel_rescale: str = "node"

    def __post_init__(self) -> None:
        problems = []
        if self.value_normalization not in ("minmax", "none"):
            problems.append("value_normalization must be 'minmax' or 'none'")
        if self.unvisited_value not in ("parent_mean", "zero"):
            problems.append("unvisited_value must be 'parent_mean' or 'zero'")
        if self.parent_visits not in ("children", "node"):
            problems.append("parent_visits must be 'children' or 'node'")
        if self.algorithm not in ("puct", "gumbel"):
            problems.append("algorithm must be 'puct' or 'gumbel'")
        if self.gumbel_rescale not in ("node", "tree"):
            problems.append("gumbel_rescale must be 'node' or 'tree'")
        if self.gumbel_max_considered < 1 or self.gumbel_maxvisit_init < 0.0 or self.gumbel_value_scale <= 0.0:
            problems.append("gumbel_max_considered must be >= 1, gumbel_maxvisit_init >= 0, gumbel_value_scale > 0")
        if self.num_simulations < 1:
            problems.append("num_simulations must be >= 1")
        if not 0.0 <= self.discount <= 1.0:
            problems.append("discount must be in [0, 1]")
        if self.pb_c_base <= 0.0:
            problems.append("pb_c_base must be > 0")
        if self.dirichlet_alpha <= 0.0:
            problems.append("dirichlet_alpha must be > 0")
        if not 0.0 <= self.noise_fraction <= 1.0:
            problems.append("noise_fraction must be in [0, 1]")
        if self.value_delta_max < 0.0:
            problems.append("value_delta_max must be >= 0")
        if problems:
            raise ValueError("invalid SearchConfig: " + "; ".join(problems))


@dataclass
class SearchResult:
    """What a batched search returns, one row per root.

    ``visit_counts[b]`` sums to S (the root's own preparation visit is not a child visit) and is
    zero on illegal actions. ``root_value[b]`` is value_sum / (S + 1) as LightZero reports it,
    from the point of view of the player to move at the root. ``tree`` is only set when the
    search was asked to keep it (inspection, tests). A Gumbel search also sets
    ``policy_target`` (the root's improved policy, the policy's training target in place of the
    visit distribution) and ``action`` (the action to play).
    """

    visit_counts: np.ndarray  # [B, A] int32
    root_value: np.ndarray  # [B] float32
    stats: dict[str, float] = field(default_factory=dict)
    tree: object | None = None  # lzk_mcts.tree.Tree when keep_tree=True
    policy_target: np.ndarray | None = None  # [B, A] float32, Gumbel search only
    action: np.ndarray | None = None  # [B] int64, Gumbel search only
