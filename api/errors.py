"""Errors the CLI turns into one clear message and an exit code (never a traceback)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # keep `tau --help` free of pydantic
    from taugrid.api.issues import Issue

# Exit codes (DESIGN.md): 0 ok, 1 run failed, 2 invalid config/usage, 3 not admitted/timed out,
# 4 platform error, 130 interrupted.
EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_ADMITTED = 3
EXIT_PLATFORM = 4
EXIT_INTERRUPTED = 130


class TauError(Exception):
    exit_code = EXIT_USAGE

    def __init__(
        self, message: str, *, exit_code: int | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def render(self) -> str:
        return self.message + (f"\n  hint: {self.hint}" if self.hint else "")


def _show(value: Any) -> str:
    if value is None:
        return "(missing)"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


class ConfigError(TauError):
    """One or more problems in one file, each with key path, bad value and a good example."""

    def __init__(self, source: str, issues: Sequence[Issue]) -> None:
        self.source = source
        self.issues = list(issues)
        super().__init__(self._format())

    def _format(self) -> str:
        lines = []
        for i in self.issues:
            where = f"{self.source}: {i.path}" if i.path else self.source
            value = "" if i.value is None and not i.path else f" = {_show(i.value)}"
            lines.append(f"{where}{value}: {i.message}")
            if i.example:
                lines.append("  example: " + i.example.replace("\n", "\n           "))
        if len(self.issues) > 1:
            lines.insert(0, f"{len(self.issues)} problems in {self.source}:")
        return "\n".join(lines)


def missing_extra(extra: str, what: str) -> TauError:
    """The error for an optional part that is not installed: the exact command that adds it."""
    return TauError(
        f"{what} is not installed",
        exit_code=EXIT_PLATFORM,
        hint=f"pip install 'taugrid[{extra}]' (from a TauGrid checkout: pip install -e "
        f"'.[{extra}]')",
    )
