"""The one shape of an expected failure: a stable `code` for programs, a one-line `message`
for a person. The worker reports any such error as an `error` event with both."""

from __future__ import annotations


class CodedError(Exception):
    """A failure with a stable machine-readable `code` and a one-line `message`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
