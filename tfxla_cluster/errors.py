"""Typed errors with TensorFlow's status codes and message style.

Every failure the library reports is one of these. Each class is also the ``tf.errors`` class of its
status code (``InvalidArgumentError`` here is an instance of ``tf.errors.InvalidArgumentError``, all
are ``tf.errors.OpError``), so code written for TF's errors catches ours. ``str(err)`` is the bare
message, as TF's ``Status::message()``; ``err.status`` is TF's ``"<CODE>: <message>"`` form (what TF
logs); ``err.error_code`` is TF's integer code. The CLI turns any of them into one line on stderr and
exit code 2, never a traceback.

The classes derive from TensorFlow's, so they are made on first use (module ``__getattr__``): importing
this module — and so ``import tfxla_cluster`` or ``tfxla-cluster --help`` — does not import TensorFlow.
"""
from __future__ import annotations

import threading
from typing import Any

# Our class → (TF's status code name, TF's errors_impl class for it; None: only OpError).
_CLASSES: dict[str, tuple[str, str | None]] = {
    "TfXlaError": ("UNKNOWN", None),
    "UnknownError": ("UNKNOWN", "UnknownError"),
    "InvalidArgumentError": ("INVALID_ARGUMENT", "InvalidArgumentError"),
    "NotFoundError": ("NOT_FOUND", "NotFoundError"),
    "UnimplementedError": ("UNIMPLEMENTED", "UnimplementedError"),
    "InternalError": ("INTERNAL", "InternalError"),
    "FailedPreconditionError": ("FAILED_PRECONDITION", "FailedPreconditionError"),
    "DataLossError": ("DATA_LOSS", "DataLossError"),
}
_DOCS = {
    "TfXlaError": "Base class (a ``tf.errors.OpError``). ``code`` is TF's absl status code name; raise a subclass.",
    "DataLossError": "A file that is truncated or not the format it claims (TF uses DATA_LOSS for bad protos).",
    "FlagError": "A bad ``TF_XLA_FLAGS`` / ``XLA_FLAGS`` entry. TF aborts the process here; we raise.",
}
__all__ = [*_CLASSES, "FlagError"]
_define_lock = threading.Lock()


def _restore(cls: type, message: str, state: dict) -> Any:
    err = cls.__new__(cls)
    err._init_status(message)
    err.__dict__.update(state)
    return err


def _define() -> None:
    import tensorflow as tf

    tf_errors = tf.errors  # the public module: OpError, the subclasses and the status code constants

    class TfXlaError(tf_errors.OpError):
        code = "UNKNOWN"

        def __init__(self, message: str) -> None:
            self._init_status(message)

        def _init_status(self, message: str) -> None:
            # TF's OpError: no NodeDef or Operation (as in eager execution); the code follows the class.
            tf_errors.OpError.__init__(self, None, None, message, getattr(tf_errors, self.code))
            self.args = (message,)  # repr shows the message (OpError leaves args empty)

        def __reduce__(self):
            # OpError's pickling rebuilds from the __init__ argument names; our subclasses differ.
            state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
            return _restore, (type(self), self.message, state)

        @property
        def status(self) -> str:
            return f"{self.code}: {self.message}"

    made: dict[str, type] = {"TfXlaError": TfXlaError}
    for name, (code, tf_name) in _CLASSES.items():
        if tf_name is not None:
            made[name] = type(name, (TfXlaError, getattr(tf_errors, tf_name)), {"code": code})
    made["FlagError"] = type("FlagError", (made["InvalidArgumentError"],), {})
    for name, cls in made.items():
        cls.__module__, cls.__qualname__ = __name__, name
        cls.__doc__ = _DOCS.get(name, f"TF's ``{cls.code}`` status (``tf.errors.{name}``).")
    globals().update(made)


def __getattr__(name: str) -> Any:
    if name in __all__:
        with _define_lock:  # made once: every importer must see the same classes
            if "TfXlaError" not in globals():
                _define()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
