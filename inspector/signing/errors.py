"""The one failure of this package: `SignatureError`, a `CodedError` whose code says whether the
input was bad (nothing checked) or the signature itself does not hold (`invalid`)."""

from __future__ import annotations

from inspector.core.errors import CodedError

INVALID_CODES = frozenset({"wrong-key", "invalid-signature", "untrusted-certificate"})
"""Codes that are a verdict on the signature (exit 1), not a refusal of the input (exit 2)."""


class SignatureError(CodedError):
    """A signature, key or folder that cannot be used, or a signature that does not verify."""

    @property
    def invalid(self) -> bool:
        """True when the signature was read and checked and does not hold."""
        return self.code in INVALID_CODES
