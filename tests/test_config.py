import argparse
from dataclasses import dataclass
from typing import Optional

import pytest

from xmtc.config import add_config_arguments, build_config, config_from_args, param
from xmtc.errors import ConfigError


@dataclass
class Demo:
    n: int = param(3, "count", minimum=1)
    rate: float = param(0.5, "rate", minimum=0.0, exclusive_minimum=True)
    mode: str = param("a", "mode", choices=("a", "b"))
    flag: bool = param(True, "flag")
    cap: Optional[int] = param(None, "cap", minimum=1)


def test_defaults_and_coercion():
    cfg = build_config(Demo, {"n": "7", "rate": 2, "flag": "false", "cap": 4.0})
    assert (cfg.n, cfg.rate, cfg.flag, cfg.cap, cfg.mode) == (7, 2.0, False, 4, "a")


@pytest.mark.parametrize("values, fragment", [
    ({"nn": 1}, "unknown parameter(s) 'nn'"),
    ({"n": 0}, "'n' must be >= 1"),
    ({"rate": 0}, "'rate' must be > 0.0"),
    ({"mode": "c"}, "'mode' must be one of a, b"),
    ({"n": 2.5}, "'n' expects int"),
    ({"n": True}, "'n' expects int"),
    ({"rate": float("nan")}, "'rate' expects float"),
    ({"flag": "maybe"}, "'flag' expects bool"),
    ({"n": None}, "'n' must not be null"),
])
def test_invalid_values_are_errors(values, fragment):
    with pytest.raises(ConfigError) as err:
        build_config(Demo, values, source="here")
    assert fragment in str(err.value) and str(err.value).startswith("here:")


def test_cli_options_generated_with_defaults_and_precedence(tmp_path):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Demo)
    help_text = parser.format_help()
    for opt, default in [("--n", "3"), ("--rate", "0.5"), ("--mode", "a"), ("--flag", "True"), ("--cap", "None")]:
        assert opt in help_text and f"(default: {default})" in help_text
    args = parser.parse_args(["--n", "9", "--cap", "none"])
    cfg = config_from_args(Demo, args, {"n": 5, "rate": 0.25}, "c.json")
    assert (cfg.n, cfg.rate, cfg.cap) == (9, 0.25, None)  # flag beats file beats default
    with pytest.raises(ConfigError, match="c.json: unknown parameter"):
        config_from_args(Demo, parser.parse_args([]), {"bogus": 1}, "c.json")


def test_xrlinear_signature_matches_config():
    import inspect
    import dataclasses
    from xmtc.models import XRLinear, XRLinearConfig

    sig = inspect.signature(XRLinear.__init__)
    fields = {f.name: f.default for f in dataclasses.fields(XRLinearConfig)}
    params = {k: p.default for k, p in sig.parameters.items() if k != "self"}
    assert params == fields
    model = XRLinear(n_trees=2)
    assert model.get_params()["n_trees"] == 2 and model.n_trees == 2
    with pytest.raises(ConfigError, match="unknown parameter"):
        XRLinear(n_tree=2)
    with pytest.raises(ConfigError, match="'beam_size' must be >= 1"):
        XRLinear(beam_size=0)
    assert model.set_params(beam_size=3).beam_size == 3
