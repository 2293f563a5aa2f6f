"""Search spaces of ``xmtc tune``: one :class:`Dimension` per parameter, checked against the config dataclass.

A dimension is written as ``NAME=SPEC``, the same way on the command line (``--param``) and in a method's
default space (``TUNE_SPACE``, a class attribute of its config dataclass, next to the fields it names):

* ``LOW..HIGH`` -- a range, of whole numbers when the field is an int, else of floats;
  ``LOW..HIGH:log`` samples it on a log scale (both ends > 0);
* ``a,b,c`` -- a choice among values (one value fixes the parameter for every trial).

Every value is converted and range-checked by the field's own declaration (:func:`xmtc.config._coerce`),
so a name the method does not have, a word where a number belongs or a value out of the field's bounds is
a one-line ConfigError before any trial runs, not a failed trial an hour later.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..config import _coerce, _field_type
from ..errors import ConfigError


@dataclass(frozen=True)
class Dimension:
    """One searched parameter: a range (``low``/``high``, ``log``) or a choice among ``choices``."""

    name: str
    low: Any = None
    high: Any = None
    log: bool = False
    choices: tuple | None = None
    integer: bool = False

    def contains(self, value: Any) -> bool:
        """Whether ``value`` (e.g. the parameter's default) lies in this dimension."""
        if self.choices is not None:
            return value in self.choices
        return value is not None and self.low <= value <= self.high

    def suggest(self, trial) -> Any:
        """The trial's value for this dimension (Optuna's ``suggest_*``)."""
        if self.choices is not None:
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.integer:
            return trial.suggest_int(self.name, self.low, self.high, log=self.log)
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    def spec(self) -> str:
        """The ``NAME=SPEC`` text this dimension is parsed from (for logs and the study's record)."""
        if self.choices is not None:
            return f"{self.name}={','.join(_text(v) for v in self.choices)}"
        return f"{self.name}={_text(self.low)}..{_text(self.high)}{':log' if self.log else ''}"


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_dimension(config_class: type, text: str, source: str = "--param") -> Dimension:
    """``NAME=LOW..HIGH[:log]`` or ``NAME=a,b,c`` as a :class:`Dimension` of ``config_class``'s field NAME."""
    name, sep, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    if not sep or not name or not spec:
        raise ConfigError(f"{source} {text!r}: expected NAME=LOW..HIGH[:log] or NAME=a,b,c")
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    if name not in fields:
        raise ConfigError(f"{source} {text!r}: unknown parameter {name!r} for {config_class.__name__};"
                          f" known: {', '.join(fields)}")
    field = fields[name]
    tp, _ = _field_type(config_class, field)
    where = f"{source} {text!r}"
    if ".." in spec:
        rng, _, scale = spec.partition(":")
        if scale not in ("", "log"):
            raise ConfigError(f"{where}: the only scale a range takes is ':log', got {scale!r}")
        if tp not in (int, float):
            raise ConfigError(f"{where}: {name!r} is a {tp.__name__}; give its values as a,b,c")
        low_text, _, high_text = rng.partition("..")
        low = _coerce(config_class, field, low_text.strip(), where)
        high = _coerce(config_class, field, high_text.strip(), where)
        if not low < high:
            raise ConfigError(f"{where}: LOW must be below HIGH")
        if scale == "log" and low <= 0:
            raise ConfigError(f"{where}: a log-scale range needs LOW > 0")
        return Dimension(name, low=low, high=high, log=scale == "log", integer=tp is int)
    values = []
    for part in spec.split(","):
        value = _coerce(config_class, field, _none_or(part.strip()), where)
        if value not in values:
            values.append(value)
    return Dimension(name, choices=tuple(values))


def _none_or(text: str) -> Any:
    return None if text.lower() in ("none", "null") else text


def default_space(config_class: type) -> dict[str, Dimension]:
    """The method's declared space (its config's ``TUNE_SPACE``), parsed; empty when it declares none."""
    specs = getattr(config_class, "TUNE_SPACE", ())
    return {d.name: d for d in (parse_dimension(config_class, s, f"{config_class.__name__}.TUNE_SPACE")
                                for s in specs)}


def build_space(config_class: type, params: list[str], use_default: bool = True) -> dict[str, Dimension]:
    """The searched dimensions: the declared default space (``use_default``), each ``--param`` added or
    replacing the default's entry of the same name. A ConfigError when nothing is left to search."""
    space = default_space(config_class) if use_default else {}
    for text in params:
        dim = parse_dimension(config_class, text)
        space[dim.name] = dim
    if not space:
        raise ConfigError(f"{config_class.__name__} declares no default search space; name the parameters to"
                          " search with --param NAME=LOW..HIGH or NAME=a,b,c")
    return space


def space_record(space: dict[str, Dimension]) -> list[str]:
    """The space as its ``NAME=SPEC`` texts, sorted (stored with a study so a resume can compare)."""
    return sorted(d.spec() for d in space.values())
