"""Entry point of the lzk_unizero plugin (to be declared as ``unizero = "lzk_unizero.plugin"``).

It will register the ``unizero`` policy (:class:`lzk_unizero.policy.UniZeroPolicy`, schema
:class:`lzk_unizero.config.UniZeroPolicyConfig`) once the UniZero buffer (sequence value targets
through ``UniZeroPolicy.value_fn``) and the segment trainer exist. Nothing is registered yet.
"""
from __future__ import annotations
