"""A workload run on a stack or the emulated slice: its row in ``raytpu runs`` (``run_list``) and what following it
hands the command (``following``; :mod:`raytpu.console.followed_run` prints that). Imports :mod:`raytpu.core` and,
lazily, :mod:`raytpu.workloads`; never ``cluster`` or ``local``."""
