"""How a table option is declared: its Paimon key, parser, default and doc
(:class:`OptionSpec`), as the metadata of a :class:`~changelake.options.TableOptions` field
(:func:`declare`)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from changelake.errors import OptionError


class OptionEffect(enum.Enum):
    """What changelake does with an option (docs/options.md says it for each)."""

    ACTS = "acts on it"
    # validated and kept in the schema for the other Paimon engines, which act on it
    STORES = "stores it only"


@dataclass(frozen=True)
class OptionSpec:
    """One Paimon option: its key, parser, default (Paimon's text, or derived from other
    options, or none) and what it does."""

    key: str
    parse: Callable[[str], Any]
    default: str | None
    doc: str
    derive: Callable[[Mapping[str, Any]], Any] | None = None
    # Values changelake can act on; a new table with any other value is refused, since Paimon's
    # readers would trust the option and read what changelake wrote wrongly.
    supports: Callable[[Any], bool] | None = None
    unsupported: str = ""
    # older keys Paimon still reads when the key is absent (its ``withFallbackKeys``)
    fallback_keys: tuple[str, ...] = ()
    effect: OptionEffect = OptionEffect.ACTS

    def text(self, raw: Mapping[str, str]) -> str | None:
        """The option's text in ``raw``: under its key, else under a fallback key."""
        for key in (self.key, *self.fallback_keys):
            if key in raw:
                return raw[key]
        return None

    def value(self, text: str, table: str) -> Any:
        try:
            return self.parse(text)
        except (ValueError, TypeError) as exc:
            raise OptionError(f"has invalid value {text!r}: {exc}", table=table, option=self.key) from None

    def check_supported(self, value: Any, table: str) -> None:
        """OptionError when changelake cannot act on ``value`` (yet)."""
        if self.supports is not None and not self.supports(value):
            raise OptionError(f"value {value!r} is not supported: {self.unsupported}", table=table, option=self.key)


def declare(
    key: str,
    parse: Callable[[str], Any],
    default: str | None,
    doc: str,
    *,
    derive: Callable[[Mapping[str, Any]], Any] | None = None,
    supports: Callable[[Any], bool] | None = None,
    unsupported: str = "",
    fallback_keys: tuple[str, ...] = (),
    effect: OptionEffect = OptionEffect.ACTS,
) -> Any:
    """A :class:`~changelake.options.TableOptions` field for the option ``key``: its default is
    Paimon's ``default`` text parsed (None when the option has none), its spec the metadata."""
    spec = OptionSpec(key, parse, default, doc, derive, supports, unsupported, fallback_keys, effect)
    return dataclasses.field(default=None if default is None else parse(default), metadata={"option": spec})
