"""The ``raytpu`` command: a thin dispatcher over ``raytpu.commands.*`` (each: ``HELP``, ``add_arguments``, ``run``;
standard library at module level, heavy imports inside ``run``, so ``raytpu describe`` starts fast). Errors become
``error: <field>: <problem>; valid: <...>`` on stderr, exit 2 (bad input) or 1 (runtime failure), never a traceback.
What commands share lives apart, in :mod:`raytpu.console` (argument types, options, the machine check and the printed
forms), which imports neither the commands nor this dispatcher."""

from __future__ import annotations

import argparse
import difflib
import importlib
import pkgutil
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from raytpu import __version__
from raytpu.core.common import timeline
from raytpu.core.common.errors import EXIT_INTERRUPTED, EXIT_INVALID, InvalidInput, InvalidInputs, RaytpuError, report

ORDER = ("catalog", "describe", "validate", "synth", "local", "demo", "images", "submit", "runs", "smoke",
         "doctor", "report")
"""Help-listing order; any other module in ``raytpu.commands`` is listed after these."""


def command_names() -> list[str]:
    """The subcommands: every module of ``raytpu.commands``, in ``ORDER`` first."""
    import raytpu.commands

    found = {m.name for m in pkgutil.iter_modules(raytpu.commands.__path__)}
    return [n for n in ORDER if n in found] + sorted(found - set(ORDER))


class _Parser(argparse.ArgumentParser):
    """argparse with the kit's error format (``error: <field>: <problem>; valid: <...>``) and exit 2."""

    def error(self, message: str) -> NoReturn:
        field, problem, valid = self.explain(message)
        fail(field, problem, valid)

    def explain(self, message: str) -> tuple[str, str, str]:
        """Splits an argparse message into the field it concerns, the problem and what is valid."""
        usage = f"see `{self.prog} --help`"
        if match := re.match(r"argument (\S+?)(?:/\S+)?: (invalid choice: '(.*?)')(?: \(choose from (.*)\))?$",
                             message):
            choices = (match[4] or "").replace("'", "")
            return match[1], match[2] + did_you_mean(match[3], choices.split(", ")), choices or usage
        if match := re.match(r"argument (\S+?)(?:/\S+)?: (.*)$", message):
            problem, _, valid = match[2].partition("; valid: ")  # an argtypes refusal says what is valid
            return match[1], problem, valid or usage
        if match := re.match(r"the following arguments are required: (.*)$", message):
            return match[1], "is required", usage
        return "arguments", message, usage

    def options(self) -> str:
        """This parser's option strings, for listing what is valid."""
        return ", ".join(o for action in self._actions for o in action.option_strings) or "(none)"


def did_you_mean(typed: str, known: Sequence[str]) -> str:
    """`` (did you mean --json?)`` for a mistyped command or option close to one of ``known``, else ``""``
    (argparse has ``suggest_on_error`` only from Python 3.14)."""
    close = difflib.get_close_matches(typed, [k for k in known if k], n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def fail(field: str, problem: str, valid: str) -> NoReturn:
    """Prints one usage problem in the contract's format and exits 2."""
    report(InvalidInput(field, problem, valid))
    sys.exit(EXIT_INVALID)


def build_parser() -> argparse.ArgumentParser:
    """The full parser; imports every command module (all are standard-library-only at import)."""
    parser = _Parser(prog="raytpu", description="Ray on Cloud TPU, as code.")
    parser.add_argument("--version", action="version", version=f"raytpu {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in command_names():
        module = importlib.import_module(f"raytpu.commands.{name}")
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(_run=module.run, _parser=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``raytpu`` console script; returns the exit code."""
    timeline.command_started()  # a run's timeline counts from here, before the heavy imports
    try:
        args, unknown = build_parser().parse_known_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed by fail(): its code
        return exc.code if isinstance(exc.code, int) else EXIT_INVALID
    except KeyboardInterrupt:  # Ctrl-C while the commands load: nothing started yet
        sys.stderr.write("error: interrupted\n")
        return EXIT_INTERRUPTED
    if unknown:
        parser = args._parser
        known = [o for action in parser._actions for o in action.option_strings]
        report(InvalidInput(unknown[0], "is not a known option" + did_you_mean(unknown[0].split("=", 1)[0], known),
                            f"options of `{parser.prog}`: {parser.options()}"))
        return EXIT_INVALID
    from raytpu.core.common import interrupt

    restore = interrupt.install()  # SIGTERM ends a command as Ctrl-C does (its cleanup runs, exit 130)
    try:
        return int(args._run(args))
    except (InvalidInput, InvalidInputs, RaytpuError) as exc:
        report(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `raytpu catalog | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0
    finally:
        restore()
        timeline.command_ended()


if __name__ == "__main__":
    sys.exit(main())
