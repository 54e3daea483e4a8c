"""The exceptions qops raises for rejected calls."""

from __future__ import annotations

__all__ = [
    "fail",
    "QopsError",
    "ValidationError",
    "UnsupportedError",
    "DTypeValidationError",
    "DTypeUnsupportedError",
]


class QopsError(Exception):
    """Base class of every error qops raises on purpose."""


class ValidationError(QopsError, ValueError):
    """A call qops rejects before running anything.

    Attributes
    ----------
    operator : str or None
        Registry name of the operator (``"QUANTIZED_LINEAR_CONVOLUTION"``).
    slot : str or None
        The tensor slot or attribute at fault, if one is.
    given : object
        What was given (a shape, a dtype name, a value).
    allowed : object
        What the feature level or opset allows, where that is a list.
    first_version : FeatureLevel, Opset or None
        The first feature level or opset that would accept ``given``.
    """

    def __init__(self, message, *, operator=None, slot=None, given=None, allowed=None,
                 first_version=None):
        super().__init__(message)
        self.operator = operator
        self.slot = slot
        self.given = given
        self.allowed = allowed
        self.first_version = first_version


class UnsupportedError(ValidationError):
    """Something the requested feature level or opset does not support."""


class DTypeValidationError(ValidationError, TypeError):
    """A data type that breaks a constraint (for example a zero point whose type
    differs from its tensor's)."""


class DTypeUnsupportedError(UnsupportedError, TypeError):
    """A data type the requested feature level or opset does not support."""


def fail(operator, message, cls=ValidationError, **fields):
    """Raise ``cls`` with ``message`` prefixed by the operator's name
    (``operator``: a registry :class:`~qops.registry.Operator`, or anything
    with a ``name``)."""
    raise cls(f"{operator.name}: {message}", operator=operator.name, **fields)
