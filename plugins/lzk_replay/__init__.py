"""lzk_replay: the game-segment replay buffer of MuZero-family agents (first-party lzkernel plugin).

Leaf package: imports numpy and the lzkernel public API only (no torch, no models). Buffers ask
the policy (passed as ``source``) for what their targets need, through the kernel's value-source
Protocols: the ``game`` buffer through :class:`lzkernel.ObservationValues` (``value_fn`` for
n-step targets, ``reanalyze_fn`` for ReZero buffer reanalysis), the ``unizero`` buffer through
:class:`lzkernel.SequenceValues`. Learner batches are :class:`lzkernel.Batch`.

Modules: :mod:`.segment` (cutting trajectories into padded segments), :mod:`.storage` (slot
arrays), :mod:`.sampling` (uniform / prioritised draws, IS weights), :mod:`.targets` (n-step
targets), :mod:`.reanalyze` (backward-view reanalysis), :mod:`.buffer` (``GameBuffer``),
:mod:`.sequence_buffer` (``SequenceGameBuffer``: UniZero sequence bootstrap values),
:mod:`.sequence_reanalyze` (UniZero history-window buffer reanalysis), :mod:`.plugin` (the
``game`` and ``unizero`` buffer components).

Decisions on the SPEC's [BUG?] items and LightZero quirks (details in each module):

* trim misalignment (§2.5): fixed by construction: priorities live in the segments' slots and a
  transition index is ``segment_id * L + pos``; trimmed indices are recognised, not remapped.
* relative-index reward sign (§2.6): fixed: signs compare ``to_play`` at absolute indices.
* zero-priority tails (§2.5): not copied; a segment is stored only with its full padding (or
  once its episode ended), so every stored position has complete target data.
* position redraws (§2.5, ``pos >= len - 1``): not copied; every stored transition can be a root.
* mask: 1 where t + k is a real transition (padding included), including k = K.
* truncated, non-terminal ends bootstrap from the final observation.
* reanalysis (§3.1): covers every stored transition (whole segments as chunks), no gaps.
* UniZero (§4.5): bootstrap sequences start at position 0 (no ``start_pos`` offset), all K + 1
  sequence values are used, each offset reads the first sequence position holding its bootstrap
  step; buffer reanalysis searches each own position of the drawn segments once from its
  history window and writes back visits and root values (see :mod:`.sequence_buffer`).
"""
from lzk_replay.buffer import GameBuffer
from lzk_replay.reanalyze import ReanalyzeFn
from lzk_replay.segment import GameSegment, SegmentCutter, stacked_shape
from lzk_replay.sequence_buffer import SequenceGameBuffer, SequenceValueFn
from lzk_replay.sequence_reanalyze import SequenceReanalyzeFn
from lzk_replay.targets import BootstrapFn, ValueFn

__all__ = ["BootstrapFn", "GameBuffer", "GameSegment", "ReanalyzeFn", "SegmentCutter",
           "SequenceGameBuffer", "SequenceReanalyzeFn", "SequenceValueFn", "ValueFn", "stacked_shape"]
