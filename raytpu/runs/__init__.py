"""A workload run, whichever side it ran on (a deployed stack or the emulated slice): its row in ``raytpu runs``
(``run_list``) and what following it prints and writes (``followed_run``).

It imports :mod:`raytpu.core` and, lazily, :mod:`raytpu.workloads` (a run's result); never ``cluster`` or ``local``.
"""
