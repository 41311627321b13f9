"""lzk_efficientzero: the EfficientZero policy plugin (value-prefix world model, its search
adapter and learner); with the ``rezero`` trainer it is ReZero-EfficientZero.

EfficientZero (Ye et al. 2021) is the latent-model family of :mod:`lzk_common` (representation,
dynamics trunk, prediction, SSL consistency, unrolled loss, learner, policy) whose dynamics carry
an LSTM: its output predicts the **value prefix**, the undiscounted reward sum since the LSTM
state was last reset, on the categorical reward support; the state restarts from zero every
``lstm_horizon_len`` = H steps. The search gets each edge's reward as the difference of
consecutive prefixes. Modules (importing this package does not import torch):

* ``config``     ``EfficientZeroPolicyConfig`` / ``EfficientZeroModelConfig``
* ``net``, ``model_mlp``, ``model_conv``, ``models``   the LSTM value-prefix head and ``build_model``
* ``inference``  the search snapshot: (latent, h, c, prefix, depth) at the search's slots, the
  reset rule per node depth, rewards from prefixes
* ``numba_lstm`` the ``numba`` search backend's step kernel (residual MLP + LSTM, one call per
  simulation)
* ``loss``, ``learner``   the unroll with the LSTM state and its resets, value-prefix targets
* ``policy``     ``EfficientZeroPolicy``
* ``plugin``     registers the ``efficientzero`` policy component

The rules, at one place (H = ``lstm_horizon_len``; a node's depth counts edges from the root):

* learner: (h, c) = 0 at the root; after unroll step k the state is zeroed when (k + 1) % H == 0;
  step k's value-prefix target is Σ_{j = H·⌊k/H⌋}^{k} r_{t+j} (:mod:`lzk_replay.targets`);
* search: the root's state is 0 and its prefix 0; a node at depth d is computed from its
  parent's stored state, and stores a zero state when d % H == 0 (LightZero's ``is_reset``);
  the reward of the edge into it is prefix(d) − prefix(parent), or prefix(d) where the parent's
  state was fresh (the root, or depth % H == 0). So depth d ↔ unroll step d − 1 everywhere.

Decisions where LightZero (addendum C, SPEC §2.3) leaves room or looks wrong:

* value-prefix targets restart from each sample's root (LightZero's target counter runs across
  the batch, so most samples' targets reset at other steps than the learner's LSTM: C.4 [BUG?]);
* the search's min-max statistics see the same rewards as the selection and backup (LightZero
  updates them with the un-reset prefix difference below a reset node: C.5 [BUG?]);
* everything MuZero decides (lzk_muzero) holds here too: one network call per simulation,
  seeded tie-breaking, deterministic eval ties, BN-folded snapshots, Σ/(S + 1) root values.
"""
