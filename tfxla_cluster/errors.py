"""Typed errors with TensorFlow's status codes and message style.

Every failure the library reports is one of these. ``str(err)`` is the bare message, as TF's
``Status::message()``; ``err.status`` is TF's ``"<CODE>: <message>"`` form (what TF logs). The CLI turns
any of them into one line on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations


class TfXlaError(Exception):
    """Base class. ``code`` is TF's absl status code name."""

    code = "UNKNOWN"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def status(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidArgumentError(TfXlaError):
    code = "INVALID_ARGUMENT"


class NotFoundError(TfXlaError):
    code = "NOT_FOUND"


class UnimplementedError(TfXlaError):
    code = "UNIMPLEMENTED"


class InternalError(TfXlaError):
    code = "INTERNAL"


class FailedPreconditionError(TfXlaError):
    code = "FAILED_PRECONDITION"


class DataLossError(TfXlaError):
    """A file that is truncated or not the format it claims (TF uses DATA_LOSS for bad protos)."""

    code = "DATA_LOSS"


class FlagError(InvalidArgumentError):
    """A bad ``TF_XLA_FLAGS`` / ``XLA_FLAGS`` entry. TF aborts the process here; we raise."""
