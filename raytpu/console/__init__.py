"""What the commands share, apart from the dispatcher (:mod:`raytpu.cli`): argument types (``argtypes``), options two
commands take (``cli_args``), the machine check (``machine``) and the printed forms (``slice_map``, ``report_html``,
``followed_run``). It imports neither a command nor the dispatcher, so the arrows run one way: cli -> commands ->
console -> the library."""
