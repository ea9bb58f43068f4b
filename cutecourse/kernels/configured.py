"""A kernel's configuration is the arguments it was built with, and nothing else.

Two kernel objects compile to the same code exactly when they are of the same class and were
built with the same constructor arguments: M, N and K are run-time values, everything else
(tile, cluster, stages, scheduler, epilogue op ...) is fixed at compile time. So the compile
cache (``gemm_launch.compile_once``) keys on :meth:`Configured.key`, which reads the
arguments back from the constructor call itself: a new constructor option is part of the key
the moment it exists, with no tuple to keep up to date by hand.
"""

from __future__ import annotations

import inspect


def _frozen(value):
    """``value`` as something hashable: lists become tuples, an epilogue op its own ``key()``."""
    if hasattr(value, "key") and callable(value.key) and not isinstance(value, type):
        return value.key()
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


class Configured:
    """Base of the course's kernel classes: records the (defaulted) constructor arguments in
    ``arguments`` before ``__init__`` runs."""

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        bound = inspect.signature(cls.__init__).bind(self, *args, **kwargs)
        bound.apply_defaults()
        self.arguments = {k: v for k, v in list(bound.arguments.items())[1:]}  # without self
        return self

    def key(self):
        """What the compiled code depends on: the class and its constructor arguments."""
        return (type(self), _frozen(self.arguments))
