"""lzk_alphazero: AlphaZero — a policy that searches with the real game (a simulator), its
network, learner and trainer (first-party lzkernel plugin).

Modules (importing this package imports nothing heavy):

* ``config``   ``AlphaZeroPolicyConfig`` / ``AlphaZeroModelConfig`` (schema of ``policy: alphazero``)
* ``model``    the residual conv network for board planes and the MLP for vectors: policy logits
               and a tanh value in [−1, 1]
* ``learner``  policy cross-entropy to the search's visits + value MSE to the outcome + weight decay
* ``policy``   ``AlphaZeroPolicy``: batched simulator-driven search (``lzk_mcts.SimulatorModel``)
* ``trainer``  the ``alphazero`` trainer on the shared loop
* ``plugin``   registers the ``alphazero`` policy and trainer

Where we follow the AlphaZero paper rather than LightZero (SPEC §5), see
``docs/algorithms/alphazero.md``: the policy target is the raw visit distribution (LightZero stores
visits sharpened by T = 0.25); moves are sampled in proportion to the visits for the first
``sample_moves`` moves of a game and the most visited is played after (LightZero: T = 0.25 on every
move); the Dirichlet noise is drawn anew at every move from the policy's seeded generator (LightZero's
C++ tree reuses one draw); every node keeps a cloned simulator state (LightZero replays each
simulation from the root); one batched network call per simulation serves every tree; the policy's
softmax (loss and priors) is over the legal moves only (LightZero: over all moves, and its priors
are not renormalised).
"""
