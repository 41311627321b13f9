"""lzk_common: what every search-based policy shares (MuZero, UniZero, AlphaZero, EfficientZero).

A library plugin: it registers no components, and algorithm plugins import it instead of each
other. Modules (importing this package imports nothing heavy; the submodules import torch):

* ``options``   config options: visit temperature, search constants, learning geometry, and the
                latent-model family's model and learner options (no torch)
* ``support``   scalar transform h / h⁻¹ and the categorical support (two-hot φ, decoding)
* ``losses``    the learner batch as tensors, soft cross-entropy, entropy, SSL cosine, loss weights
* ``learner``   the optimizer step (averaging, clipping, non-finite policy) and learner state;
                the latent-model learner step (optimizer, 1/K scaling, target network)
* ``policy``    online/target models, weight versions and snapshots, RNG, checkpoint state
* ``acting``    the collect/eval action rule, visit distributions, pure-policy sampling, threads
* ``slots``     a torch store for per-node search embeddings

The latent-model family (MuZero and EfficientZero: a learned representation / dynamics /
prediction network, an unrolled loss, a target network, batched search over latents):

* ``blocks``         grouped BatchNorm, MLP/ResBlock/SimNorm/SSL heads, the ``LatentNet`` interface
* ``latent_models``  the MLP and conv networks up to the algorithm's transition head
* ``latent_loss``    the unrolled K-step loss around the algorithm's recurrent step
* ``latent_policy``  acting, value targets, reanalysis and learning around a search snapshot
* ``inference``      BN folding and the search snapshot base (slots, step timing, decoding)
* ``numba_mlp``, ``numba_simd``   compiled search kernels of the residual MLP (panels, dense
                                  microkernel, decoding, prediction) and the backend base
* ``numba_rows``     the learner's fused row passes on CPU (SSL negative cosine, soft cross-entropy)
"""
