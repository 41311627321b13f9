"""lzk_muzero: the MuZero policy plugin (models, search adapter, learner).

MuZero is the latent-model family of :mod:`lzk_common` (representation, dynamics trunk,
prediction, unrolled loss, learner, policy, compiled search kernels) with a reward head after
the dynamics. Modules (importing this package does not import torch; the submodules below do):

* ``config``     ``MuZeroPolicyConfig`` / ``MuZeroModelConfig`` (schema of the ``policy`` section)
* ``net``, ``model_mlp``, ``model_conv``, ``models``   the reward head, recurrent step and ``build_model``
* ``inference``  the search snapshot (latents at the search's slots) and the fused torch step
* ``numba_mlp``  the ``numba`` search backend's step kernel: one compiled call per simulation
* ``loss``, ``learner``   the MuZero loss (per-step reward targets) and its learner
* ``policy``     ``MuZeroPolicy``: act (collect/eval), value_fn, reanalyze_fn, learn, state_dict
* ``plugin``     registers the ``muzero`` policy component

Decisions where LightZero (SPEC §2) leaves room or looks wrong:

* SSL mask: recurrent step k's consistency term is weighted by ``mask[:, k]``, which lzk_replay
  sets to 1 when transition t+k is real, i.e. when o_{t+k+1} (the SSL target) is a real
  observation. This is LightZero's indexing; lzk_replay counts padding transitions as real.
* SSL targets come from the online network in train mode without gradient (as LightZero), so
  BatchNorm uses batch statistics there and its running statistics see the target batches too.
* 1/K gradient scaling seeds ``backward`` with 1/K (identical to LightZero's hook on the loss);
  multi-rank gradients are averaged before clipping (LightZero's order).
* The LR schedule is a pure function of the learner step count, which is checkpointed; there is
  no separate scheduler state.
* Eval breaks search ties deterministically (LightZero's MuZero eval breaks them at random).
* Acting and replay callbacks use BN-folded eval snapshots rebuilt when weights change, never
  the live (train-mode) model.
* ``learn_dtype`` defaults to ``auto``: bfloat16 autocast only where the device multiplies bf16
  natively (AMX or AVX-512 BF16 CPUs, bf16 GPUs; :mod:`lzk_common.precision`), float32 elsewhere:
  emulated bf16 (AVX2, AVX-512 without BF16) was 10–15× slower than float32.
* A non-finite loss or gradient norm raises by default (``on_nonfinite: skip`` drops the batch
  and restores the BN statistics instead).
"""
