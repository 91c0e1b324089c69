"""A workload run on a stack or the emulated slice: its row in ``raytpu runs`` (``run_list``), what following it
hands the command (``following``) and what that prints and writes (``followed_run``). Imports :mod:`raytpu.core`
and, lazily, :mod:`raytpu.workloads`; never ``cluster`` or ``local``."""
