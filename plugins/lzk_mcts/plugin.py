"""Entry point of the lzk_mcts plugin.

``lzk_mcts`` is a library, not a component provider: it defines no ``lzkernel_register_*``
hooks, so loading it registers nothing. Policies (``lzk_muzero``, ``lzk_rezero``, ...) import
``lzk_mcts.search`` / ``lzk_mcts.select_action`` directly. The entry point exists so that
``lzkernel plugins`` lists it with the other first-party plugins; keep this module free of
numba/numpy imports so that listing plugins stays fast.
"""
