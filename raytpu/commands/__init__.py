"""One module per ``raytpu`` subcommand: ``HELP``, ``add_arguments(parser)``, ``run(args) -> int``."""
