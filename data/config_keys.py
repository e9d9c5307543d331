"""The error of a config key no schema knows (:class:`UnknownConfigKeyError`), shared by every
structured config loader (``toolgym.trainers.config.load_config`` / ``strict_dataclass``, the
dialogue generator's ``GeneratorConfig.from_dict``), and the one shape of a range check's error
(:func:`require`). It sits at the bottom of the package so the data layer's own configs (a
mixture's sources) can raise them too."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["UnknownConfigKeyError", "check_known_keys", "require"]


class UnknownConfigKeyError(ValueError):
    """A config key that the section does not have (a typo, a setting of another section): a
    ``ValueError``, so the command line shows it as one line; ``valid`` lists the keys the section
    does have, and the message names them too."""

    def __init__(self, message: str, key: str | None = None, valid: Iterable[str] = ()):
        self.key = key
        self.valid = sorted(valid)
        super().__init__(message if not self.valid else f"{message}; valid keys: {self.valid}")


def check_known_keys(given: Iterable[Any], valid: Iterable[str], what: str) -> None:
    """:class:`UnknownConfigKeyError` naming the keys of ``given`` that are not in ``valid``
    (``what`` names the section: ``unknown GRPO settings: ['learning_rate']; valid keys: [...]``)."""
    valid = list(valid)
    unknown = sorted(map(str, set(given) - set(valid)))
    if unknown:
        raise UnknownConfigKeyError(f"unknown {what}: {unknown}", unknown[0], valid)


def require(ok: bool, key: str, value: Any, rule: str) -> None:
    """The one shape of a range check's error: ``ValueError("key=value: rule")`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{key}={value!r}: {rule}")
