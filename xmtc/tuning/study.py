"""The Optuna study behind ``xmtc tune``: trials, the defaults as a trial, resuming, choosing, the table.

* The method's defaults are the study's first trial (``enqueue_trial``), so the search always has the
  score to beat and the chosen configuration is never worse than the defaults on the validation part.
* The best trial replaces the defaults only when its gain is larger than ``noise_z`` times its paired
  bootstrap noise (:func:`xmtc.tuning.objective.gain_and_noise`): with 2,000 validation documents one
  standard deviation of a P@1 difference between two configurations is a few tenths of a point, and the
  best of 20 noisy draws is expected to beat the defaults by about that much with no real gain at all.
* Trials are stored where ``storage`` says (an Optuna URL such as ``sqlite:///tune.db``); a second run
  with the same storage and study name adds its trials to those already there. The study records the
  method, metric and split, and a run that would mix scores of another setting is refused.
* Pruning: no xmtc method reports a score before its fit ends (XR-Linear's fit is one pass of
  solvers; the end-to-end methods choose their epoch inside ``fit``), so no trial is pruned; Optuna's
  TPE sampler (seeded) picks the next configuration from the finished ones.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, XmtcError
from ..progress import progress_bar
from .objective import Metric, TrialRunner, gain_and_noise, metric_value
from .space import Dimension, space_record

log = logging.getLogger(__name__)

DEFAULT_ATTR = "xmtc_default"  # user attribute of the trial that runs the method's defaults
STATS_ATTR = "xmtc_doc_stats"  # per-document stats of a trial (rounded), for the noise test


@dataclass
class Outcome:
    """What the search found: the chosen values, the default and best scores and the gain's noise."""

    values: dict[str, Any]
    chosen: str  # "best" or "default"
    default_value: float | None
    best_value: float | None
    best_number: int | None
    gain: float
    noise: float
    n_trials: int


def _require_optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError("xmtc tune needs Optuna: pip install 'xmtc[tune]' (or pip install optuna)") from None
    return optuna


def open_study(storage: str | None, name: str | None, record: dict[str, Any], seed: int):
    """Create or reopen the study; refuse a stored one whose method, metric or split differs from ``record``."""
    optuna = _require_optuna()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(storage=storage, study_name=name, direction="maximize", load_if_exists=True)
    except (ValueError, ImportError, ModuleNotFoundError) as exc:  # a bad URL, a missing database driver
        raise ConfigError(f"--storage {storage!r}: {exc}") from None
    except Exception as exc:  # SQLAlchemy's errors: an unreadable file, a database of something else
        raise ConfigError(f"--storage {storage!r}: cannot open the study ({type(exc).__name__}:"
                          f" {str(exc).splitlines()[0]})") from None
    stored = study.user_attrs.get("xmtc")
    if stored is None:
        study.set_user_attr("xmtc", record)
    else:
        for key in ("method", "metric", "train", "valid_docs", "valid_seed"):
            if stored.get(key) != record.get(key):
                raise ConfigError(f"study {study.study_name!r} was run with {key} {stored.get(key)!r}, not"
                                  f" {record.get(key)!r}: its scores are not comparable; use another"
                                  " --study-name")
        if stored.get("space") != record.get("space"):
            log.warning("the search space differs from the study's earlier runs; earlier trials stay in it")
    # a resumed study's sampler starts from another seed: the same one would draw the same trials again
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials))
    return study


def run_study(study, runner: TrialRunner, space: dict[str, Dimension], defaults: dict[str, Any], *,
              n_trials: int | None, timeout: float | None, progress: bool) -> None:
    """Run trials until ``n_trials`` more have finished or ``timeout`` seconds have passed (a trial under
    way then finishes); the defaults' trial first when the study has none yet."""
    optuna = _require_optuna()
    if not any(t.user_attrs.get(DEFAULT_ATTR) and t.state.name in ("COMPLETE", "WAITING") for t in study.trials):
        study.enqueue_trial({n: defaults[n] for n, d in space.items() if d.contains(defaults[n])},
                            user_attrs={DEFAULT_ATTR: True})

    def objective(trial):
        is_default = bool(trial.user_attrs.get(DEFAULT_ATTR))
        values = {}
        for name, dim in space.items():
            if is_default and not dim.contains(defaults[name]):
                values[name] = defaults[name]  # a default outside the space (n_trees 0 = auto) runs as it is
            else:
                values[name] = dim.suggest(trial)
        same = next((t for t in trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                     if t.params == trial.params and STATS_ATTR in t.user_attrs), None)
        if same is not None and not is_default:  # a small space draws a configuration twice: no second fit
            trial.set_user_attr("repeat_of", same.number)
            trial.set_user_attr(STATS_ATTR, same.user_attrs[STATS_ATTR])
            return same.value
        t0 = time.perf_counter()
        try:
            stats = runner.run(values)
        except XmtcError as exc:
            if is_default:
                raise _DefaultFailed(exc) from None
            trial.set_user_attr("error", str(exc).splitlines()[0][:300])
            raise  # Optuna records the trial as failed and goes on; the table says why
        trial.set_user_attr("seconds", round(time.perf_counter() - t0, 2))
        trial.set_user_attr(STATS_ATTR, np.round(stats, 5).tolist())
        return metric_value(runner.metric, stats)

    total = n_trials if n_trials is not None else int(math.ceil(timeout))
    with progress_bar(progress, total=total, unit="trial" if n_trials is not None else "s", desc="tune") as bar:
        t_start = time.perf_counter()

        def tick(study, trial):
            if n_trials is not None:
                bar.update(1)
            else:
                bar.update(min(total, int(time.perf_counter() - t_start)) - getattr(bar, "n", 0))
            try:
                bar.set_postfix(best=f"{study.best_value:.2f}")
            except ValueError:
                pass  # no finished trial yet
            log.debug("trial %d: %s %s", trial.number, trial.state.name, trial.value)

        try:
            study.optimize(objective, n_trials=n_trials, timeout=timeout, callbacks=[tick],
                           catch=(XmtcError,), gc_after_trial=False)
        except _DefaultFailed as failed:
            raise failed.error from None


class _DefaultFailed(Exception):
    """The defaults' trial failed: the data or the fixed parameters are at fault, so the search stops."""

    def __init__(self, error: XmtcError):
        super().__init__(str(error))
        self.error = error


def choose(study, metric: Metric, defaults: dict[str, Any], space: dict[str, Dimension],
           noise_z: float, seed: int = 0) -> Outcome:
    """The configuration to write: the best trial's when it beats the defaults' by more than ``noise_z``
    standard deviations of the gain (see the module doc), else the defaults."""
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    default = next((t for t in done if t.user_attrs.get(DEFAULT_ATTR)), None)
    best = max(done, key=lambda t: t.value, default=None)
    base = {n: defaults[n] for n in space}
    if best is None:
        return Outcome(base, "default", None, None, None, 0.0, 0.0, len(study.trials))
    best_values = {**base, **best.params}
    if default is None or best.number == default.number:
        return Outcome(base, "default", default and default.value, best.value, best.number, 0.0, 0.0,
                       len(study.trials))
    gain, noise = gain_and_noise(metric, np.asarray(best.user_attrs[STATS_ATTR]),
                                 np.asarray(default.user_attrs[STATS_ATTR]), seed=seed)
    chosen = "best" if gain > noise_z * noise else "default"
    return Outcome(best_values if chosen == "best" else base, chosen, default.value, best.value, best.number,
                   gain, noise, len(study.trials))


def trial_table(study, defaults: dict[str, Any], metric: Metric, limit: int = 40) -> str:
    """The trials as a text table, best first: number, state, score, seconds and the values that differ
    from the defaults (the defaults' trial says ``(defaults)``)."""
    rows = sorted(study.trials, key=lambda t: (t.value is None, -(t.value or 0.0), t.number))
    lines = [f"{'trial':>5}  {'state':<8}  {metric.name:>8}  {'s':>6}  parameters (those differing from the defaults)"]
    for t in rows[:limit]:
        if t.user_attrs.get(DEFAULT_ATTR):
            desc = "(defaults)"
        else:
            changed = {n: v for n, v in t.params.items() if v != defaults.get(n)}
            desc = " ".join(f"{n}={_short(v)}" for n, v in sorted(changed.items())) or "(defaults' values)"
        if t.user_attrs.get("repeat_of") is not None:
            desc += f"  (as trial {t.user_attrs['repeat_of']}, not refitted)"
        if t.user_attrs.get("error"):
            desc += f"  [failed: {t.user_attrs['error']}]"
        value = f"{t.value:8.2f}" if t.value is not None else f"{'-':>8}"
        secs = t.user_attrs.get("seconds")
        lines.append(f"{t.number:>5}  {t.state.name.lower():<8}  {value}  {secs if secs is not None else '-':>6}"
                     f"  {desc}")
    if len(rows) > limit:
        lines.append(f"... and {len(rows) - limit} more trials")
    return "\n".join(lines)


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).lower() if isinstance(value, bool) else str(value)


__all__ = ["Outcome", "open_study", "run_study", "choose", "trial_table", "space_record", "DEFAULT_ATTR"]
