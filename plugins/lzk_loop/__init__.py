"""lzk_loop: the training-loop skeleton every lzkernel trainer shares.

evaluate → collect → schedule updates → push/trim → reanalyze → train → checkpoint → stop,
written once in :class:`~lzk_loop.skeleton.LoopTrainer`; algorithm trainers (ReZero, MuZero,
UniZero) override the small hooks where they differ. A library plugin: it registers no
components.
"""
from lzk_loop.reanalysis import ReanalysingTrainer
from lzk_loop.skeleton import LOOP_RESUME_SAFE, LoopConfig, LoopTrainer, loop_check

__all__ = ["LOOP_RESUME_SAFE", "LoopConfig", "LoopTrainer", "ReanalysingTrainer", "loop_check"]
