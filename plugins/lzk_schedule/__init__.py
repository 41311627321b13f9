"""lzk_schedule: first-party lzkernel plugin providing update schedules (``fixed``, ``replay_ratio``);
see :mod:`lzk_schedule.schedules`."""
