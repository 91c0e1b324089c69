"""The kit's named errors: one place that formats every "field: problem; valid: ..." message.

Every check in the kit raises one of these helpers' results, so the CLI can print them as
``error: <field>: <what is wrong>; valid: <...>`` and exit 2 without a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_INVALID = 2

_MAX_LISTED = 12


class RaytpuError(Exception):
    """Base of the kit's errors; ``exit_code`` is what the CLI exits with."""

    exit_code = EXIT_RUNTIME


class InvalidInput(RaytpuError, ValueError):
    """One bad value: which field, what is wrong with it, and what would be valid."""

    exit_code = EXIT_INVALID

    def __init__(self, field: str, problem: str, valid: str) -> None:
        self.field = field
        self.problem = problem
        self.valid = valid
        super().__init__(f"{field}: {problem}; valid: {valid}")


class InvalidInputs(RaytpuError, ValueError):
    """Several bad values found in one pass (a config file), reported together."""

    exit_code = EXIT_INVALID

    def __init__(self, problems: Sequence[InvalidInput]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class RuntimeFailure(RaytpuError):
    """Something ran and failed (an unhealthy slice, a failed job): exit 1."""

    exit_code = EXIT_RUNTIME


def listing(values: Iterable[object], limit: int = _MAX_LISTED) -> str:
    """Joins valid values for a message, eliding the middle of very long lists."""
    items = [str(v) for v in values]
    if len(items) <= limit:
        return ", ".join(items)
    head = items[: limit - 2]
    return ", ".join([*head, f"... ({len(items) - limit + 1} more)", items[-1]])


def invalid_choice(field: str, value: object, choices: Iterable[object], hint: str = "") -> InvalidInput:
    """A value that is not one of a known set; lists the set."""
    valid = listing(choices)
    return InvalidInput(field, f"{value!r} is not allowed{hint}", valid)


def invalid_value(field: str, value: object, rule: str, valid: str) -> InvalidInput:
    """A value that breaks a rule (format, range); states the rule and what would be valid."""
    return InvalidInput(field, f"{value!r} {rule}", valid)


def missing(field: str, why: str, valid: str) -> InvalidInput:
    """A field that must be present in this context."""
    return InvalidInput(field, f"is required {why}", valid)


def forbidden(field: str, value: object, why: str, valid: str) -> InvalidInput:
    """A field that must be absent in this context."""
    return InvalidInput(field, f"{value!r} is not allowed {why}", valid)
