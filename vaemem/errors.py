"""The one library error type the CLI turns into a one-line message and a non-zero exit."""

from __future__ import annotations


class VaememError(Exception):
    """A problem the user can fix (bad input, a file of an unknown schema, a failed check).

    The CLI prints ``str(error)`` on one line and exits with ``exit_code``; nothing else in the
    library is expected to reach the user as a traceback.
    """

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
