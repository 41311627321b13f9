"""lzk_unizero: the UniZero policy plugin (transformer world model, exact KV caches, learner)."""
