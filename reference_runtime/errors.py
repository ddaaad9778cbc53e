"""Step errors (TensorFlow's ``errors::`` status codes), SPEC.md EXEC clauses.

A failed step raises an ``OpError`` subclass from ``DirectSession.run``; ``node_name``,
``op`` and ``device`` say where it happened (None when not node-specific). A Python
exception raised by a kernel is the ``__cause__`` of the ``OpError``.
"""

from __future__ import annotations

__all__ = ["OpError", "InvalidArgumentError", "ResourceExhaustedError",
           "FailedPreconditionError", "CancelledError", "UnknownError"]


class OpError(RuntimeError):
    """A step failed (TF ``Status`` not OK)."""

    code = "UNKNOWN"

    def __init__(self, message: str, *, node_name: str | None = None, op: str | None = None,
                 device: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.node_name = node_name
        self.op = op
        self.device = device


class InvalidArgumentError(OpError):
    """Bad feed, fetch, shape or attribute (TF ``INVALID_ARGUMENT``)."""

    code = "INVALID_ARGUMENT"


class ResourceExhaustedError(OpError):
    """An allocation failed (TF ``RESOURCE_EXHAUSTED``, "OOM when allocating tensor")."""

    code = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, *, num_bytes: int = 0, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.num_bytes = num_bytes


class FailedPreconditionError(OpError):
    """E.g. reading an uninitialized variable (TF ``FAILED_PRECONDITION``)."""

    code = "FAILED_PRECONDITION"


class CancelledError(OpError):
    """The step was cancelled (the session was closed while it ran)."""

    code = "CANCELLED"


class UnknownError(OpError):
    """A kernel raised an exception of its own (TF ``UNKNOWN``)."""

    code = "UNKNOWN"
