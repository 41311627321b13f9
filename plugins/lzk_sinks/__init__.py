"""lzk_sinks: metric sinks on the event hooks — ``metrics.jsonl``, TensorBoard, a progress line,
``summary.json`` (how the run ended).

Each sink is its own plugin (entry points ``jsonl``, ``tensorboard``, ``progress``, ``summary``), so any of
them can be turned off with ``-p no:NAME``. Sinks write on rank 0 only (the kernel fires metric
events on rank 0 only).
"""
