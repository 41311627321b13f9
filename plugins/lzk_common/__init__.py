"""lzk_common: what every search-based policy shares (MuZero, UniZero, AlphaZero, EfficientZero).

A library plugin: it registers no components, and algorithm plugins import it instead of each
other. Modules (importing this package imports nothing heavy; the submodules import torch):

* ``options``   config options: visit temperature, search constants, learning geometry (no torch)
* ``support``   scalar transform h / h⁻¹ and the categorical support (two-hot φ, decoding)
* ``losses``    the learner batch as tensors, soft cross-entropy, entropy, SSL cosine, loss weights
* ``learner``   the optimizer step (averaging, clipping, non-finite policy) and learner state
* ``policy``    online/target models, weight versions and snapshots, RNG, checkpoint state
* ``acting``    the collect/eval action rule, visit distributions, pure-policy sampling, threads
"""
