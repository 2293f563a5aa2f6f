"""What every xmtc estimator shares: parameters, label handling, prediction formats, save/load.

Estimators follow scikit-learn's conventions: every hyperparameter is a keyword of ``__init__``
(generated from the method's config dataclass, the single source of truth), stored unchanged and
returned by ``get_params``; ``fit`` returns ``self``; learned state ends in ``_``. Inputs may be raw
texts (the estimator owns its featurizer) or a precomputed sparse feature matrix, so the same model
class serves users with text and benchmarks on shared features.

Two parts of the shell live in modules of their own: how a prediction runs over many inputs, in batches and at
several depths (:mod:`xmtc.models.batched_topk`), and the stages every saved model shares around its method's
own (:mod:`xmtc.models.model_stages`).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
from typing import Any, ClassVar, Sequence

import numpy as np
import scipy.sparse as sp

from ..config import build_config, config_to_dict
from ..data.dataset import as_label_matrix
from ..data.texts import check_texts  # noqa: F401  (methods import it from here)
from ..errors import ConfigError, ModelFormatError, NotFittedError, XmtcError
from ..registry import METHODS, estimator_class, method_names
from .batched_topk import batched_topk, topk_at_depths
from .model_stages import load_model_state, save_model
from .predictor import evaluate_predictor, named_predictions
from .storage import ModelReader, ModelWriter
from .topk import apply_threshold

log = logging.getLogger(__name__)

UNSEEN_WIDTH = 10  # raw candidates per requested label where doc-less labels are shifted down (_candidates)

__all__ = ["XMCModel", "register", "load", "estimator_class", "method_names", "check_requirements",
           "as_label_matrix", "apply_threshold"]


def register(cls: type["XMCModel"]) -> type["XMCModel"]:
    """Class decorator of an estimator listed in :mod:`xmtc.registry`: give it a keyword signature
    generated from its config dataclass (what ``help()`` and IDEs show)."""
    if METHODS.get(cls.method, (None, None))[1] != cls.__name__:
        raise TypeError(f"{cls.__name__} ({cls.method!r}) is not listed in xmtc.registry.METHODS")
    fields = dataclasses.fields(cls.config_class)
    inherited = cls.__init__

    def __init__(self, **params: Any):  # a function of its own: subclasses must not share one signature
        inherited(self, **params)

    cls.__init__ = __init__
    cls.__init__.__signature__ = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default) for f in fields])
    return cls


def check_requirements(cls: type["XMCModel"]) -> None:
    """Refuse, in one line naming the ``pip install`` that fixes it, a method whose optional packages
    are missing: before any data is read, not as an ImportError deep inside ``fit`` or ``load``.

    ``find_spec`` looks for the package without importing it (importing torch alone takes seconds)."""
    import importlib.util

    missing = [module for module in cls.requires if importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(f"the {cls.method} method needs {' and '.join(missing)}, which this Python lacks;"
                          f" install it with: pip install 'xmtc[{cls.extra}]'")


def load(folder: str | os.PathLike, *, mmap: bool = True) -> "XMCModel":
    """Load any saved xmtc model; the manifest says which estimator class rebuilds it.

    ``mmap=True``: stages that can (XR-Linear's weights) predict from a read-only memory map of their
    file instead of a private copy; ``False`` reads everything into memory (e.g. before the folder
    is deleted or rewritten in place on a file system without POSIX unlink semantics).
    """
    reader = ModelReader(folder, mmap=mmap)
    method = reader.manifest["method"]
    if method not in METHODS:
        raise ModelFormatError(f"{reader.folder}: unknown method {method!r} in manifest"
                               f" (this xmtc knows {', '.join(method_names())})")
    cls = estimator_class(method)
    check_requirements(cls)
    model = cls(**cls._params_from_manifest(reader))
    try:
        model._load_state(reader)
        reader.check_every_stage_read(method)
    except ModelFormatError as exc:
        if str(reader.folder) in str(exc):
            raise
        # a stage's own check ("hierarchical linear model: ..."): say which folder it is about
        raise ModelFormatError(f"{reader.folder}: {exc}") from None
    except XmtcError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        # the stages check what they use; this net turns anything they missed in a crafted folder
        # into the one-line error the CLI prints, instead of a traceback
        raise ModelFormatError(f"{reader.folder}: inconsistent model files ({type(exc).__name__}: {exc})") from None
    return model


class XMCModel:
    """Base class: subclasses set ``method``, ``config_class`` and implement the stage hooks."""

    method: ClassVar[str]
    config_class: ClassVar[type]
    #: importable packages the method needs beyond xmtc's own dependencies, and the extra that brings them
    requires: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[str] = ""
    #: a second fit costs little (xmtc train then refits on all documents after calibrating)
    cheap_refit: ClassVar[bool] = False
    #: ``fit`` takes ``checkpoint_dir`` and ``resume`` (long fits that can be continued)
    supports_checkpoints: ClassVar[bool] = False
    #: whether :meth:`learn` can update a trained model with new documents (:mod:`xmtc.models.learning`)
    can_learn: ClassVar[bool] = False
    #: ``xmtc train --label-file`` gives it every label of the file, also those no training document
    #: carries: suggested from their text natively or through the label-text route
    open_labels: ClassVar[bool] = True
    #: the method scores label texts itself (no label-text route is attached; :mod:`xmtc.models.open_labels`)
    native_label_texts: ClassVar[bool] = False

    def __init__(self, **params: Any):
        self._config = build_config(self.config_class, params, source=type(self).__name__)
        for key, value in config_to_dict(self._config).items():
            setattr(self, key, value)

    # -- scikit-learn style parameters -------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self.config_class)}

    def set_params(self, **params: Any) -> "XMCModel":
        merged = self.get_params()
        merged.update(params)
        self._config = build_config(self.config_class, merged, source=type(self).__name__)
        for key, value in config_to_dict(self._config).items():
            setattr(self, key, value)
        return self

    @property
    def config(self):
        """The validated config dataclass built from the current parameters."""
        return build_config(self.config_class, self.get_params(), source=type(self).__name__)

    def __repr__(self) -> str:
        defaults = {f.name: f.default for f in dataclasses.fields(self.config_class)}
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if v != defaults[k]]
        return f"{type(self).__name__}({', '.join(changed)})"

    # -- fitted state -------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "labels_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted; call fit() or xmtc.load()")

    @property
    def n_labels(self) -> int:
        self._check_fitted()
        return len(self.labels_)

    # -- prediction formats -------------------------------------------------------------------
    def predict_topk(self, X: Any, k: int = 5, *, progress: bool = False,
                     batch_size: int = 8192) -> tuple[np.ndarray, np.ndarray]:
        """Top-k label indices (int32, -1 padded) and scores (float32), best first, one row per input.

        A ``k`` above the model's number of labels asks for every label: the arrays are then
        ``n_labels`` wide (a row can hold no more), so ``k=10**12`` cannot allocate what it names.
        Inputs are processed in batches so that featurizing a large file never holds all of its
        features at once, and so that a progress bar can show documents/s and the ETA
        (:func:`xmtc.models.batched_topk.batched_topk`).
        """
        return batched_topk(self, X, k, progress, batch_size)

    def _topk_batch(self, X: Any, k_ask: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """One batch of :meth:`predict_topk`: raw top ``k_ask``, calibrated, open labels merged, cut to ``k``;
        a text with nothing to read gets no suggestion (:func:`xmtc.models.topk.drop_unreadable`)."""
        idx, scores, features = self._raw_topk(X, k_ask)  # first: its input checks name the bad text's line
        return self._finish_topk(idx, scores, X, self.known_fraction(X), k, features)

    def _raw_topk(self, X: Any, k: int) -> tuple[np.ndarray, np.ndarray, Any]:
        """:meth:`_predict_batch`'s raw top-k and, where the model keeps a stage that reads them too (the
        few-shot rankers of :mod:`xmtc.models.few_shot`), the features it computed on the way; else None."""
        return (*self._predict_batch(X, k), None)

    def _finish_topk(self, idx: np.ndarray, scores: np.ndarray, X: Any, known: np.ndarray | None, k: int,
                     features: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_topk_batch` after the method's raw top-k ``(idx, scores)`` of ``X``: calibrated, few-shot and
        open labels merged, cut to ``k``; ``known``: :meth:`known_fraction` of ``X``; ``features``: those
        :meth:`_raw_topk` gave, if any."""
        from .topk import drop_unreadable

        idx, scores = self.calibrated_topk(idx, scores, X, known=known)
        if getattr(self, "few_shot_", None) is not None:
            from .few_shot import merge_few_shot

            idx, scores = merge_few_shot(self, idx, scores, X, known, features)
        calibrated = getattr(self, "calibration_", None) is not None
        return drop_unreadable(*self._open_topk(idx, scores, X, k), X, known, calibrated)

    def predict_topk_depths(self, X: Any, depths: Sequence[int], *, progress: bool = False,
                            batch_size: int = 8192) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """``{depth: predict_topk(X, depth)}`` for each of ``depths``, each bit for bit what its own call returns,
        with the work that gives the same numbers done once (``xmtc evaluate`` asks for its metrics' k, for 10 and
        for the zero-shot depth, :mod:`xmtc.open_metrics`). What is shared, and why a deeper top-k cut down would
        not do: :func:`xmtc.models.batched_topk.topk_at_depths`."""
        return topk_at_depths(self, X, depths, progress, batch_size)

    def _raw_prefix(self, k_small: int, k_large: int) -> bool:
        """Whether the method's raw top ``k_small`` (:meth:`_predict_batch`) of any input is the first ``k_small``
        columns of its raw top ``k_large``, bit for bit (:meth:`predict_topk_depths` then asks once). Methods that
        promise it say so; by default only the same width is."""
        return k_small == k_large

    def _candidates(self, k: int) -> int:
        """How many raw suggestions to ask the method for to return ``k``: room for masked labels, and where the
        method scores labels without documents from their text (``native_label_texts``) and the calibration
        shifts those down (:meth:`Calibration.unseen_ratio`), :data:`UNSEEN_WIDTH` times ``k``, so that the
        documented labels they outranked before calibration are there to take their place (with the whole
        YSO vocabulary as label-text's label file, 93% of the labels have no document)."""
        removed = getattr(self, "removed_", None)
        ask = k + (min(int(removed.sum()), 64) if removed is not None else 0)
        cal = getattr(self, "calibration_", None)
        if self.native_label_texts and cal is not None and cal.unseen_mass is not None \
                and np.any(self.label_counts_ == 0):
            ask = max(ask, UNSEEN_WIDTH * k)
        return min(ask, max(self.n_labels, 1))

    def calibrated_topk(self, idx: np.ndarray, scores: np.ndarray, X: Any,
                        known: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Scores through the model's calibration (:mod:`xmtc.models.calibration`), if it holds one,
        damped for texts the model can hardly read (:func:`xmtc.models.calibration.damp_unreadable`);
        ``known``: :meth:`known_fraction` of ``X`` where the caller has it."""
        calibration = getattr(self, "calibration_", None)
        if calibration is None:
            return idx, scores
        from .calibration import damp_unreadable

        idx, scores = calibration.apply(idx, scores, self.label_counts_)
        known = self.known_fraction(X) if known is None else known
        return (idx, scores) if known is None else damp_unreadable(idx, scores, known)

    def _open_topk(self, idx: np.ndarray, scores: np.ndarray, X: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Labels known only by their text merged in, removed labels dropped (:mod:`xmtc.models.open_labels`)."""
        if getattr(self, "label_route_", None) is None and getattr(self, "removed_", None) is None:
            return idx[:, :k], scores[:, :k]
        from .open_labels import apply_open_labels

        texts = None if sp.issparse(X) or isinstance(X, np.ndarray) else list(X)
        return apply_open_labels(self, idx, scores, texts, k)

    def known_fraction(self, X: Any) -> np.ndarray | None:
        """Per text, the share of its words in the model's TF-IDF vocabulary (``None`` for feature rows,
        and for models without a vocabulary: a subword tokenizer reads any text)."""
        from .open_labels import text_featurizer

        featurizer = text_featurizer(self)
        if featurizer is None or sp.issparse(X) or isinstance(X, np.ndarray):
            return None
        return featurizer.known_fraction(list(X))

    def _predict_batch(self, X: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def learn(self, X: Any, Y: Any, *, labels=None, progress: bool = False) -> "XMCModel":
        """Update the trained model with new labelled documents; methods that cannot raise a one-line
        ConfigError saying why and which can (:mod:`xmtc.models.learning`)."""
        from .learning import check_can_learn

        check_can_learn(self)
        raise NotImplementedError

    def predict(self, X: Any, k: int = 5, *, progress: bool = False) -> list[list[tuple[str, float]]]:
        """Top-k ``(label name, score)`` pairs for each text (or feature row), best first."""
        return named_predictions(self, X, k, progress)

    def evaluate(self, X: Any, Y: Any, ks: Sequence[int] = (1, 3, 5), *, progress: bool = False,
                 threshold: Any = None) -> dict:
        """P@k, R@k, nDCG@k, PSP@k (propensities from the training label counts), coverage@k,
        coverage@P90/P95 and ECE@k of the scores, and F1@T when ``threshold`` (a number, or
        ``"labels"`` for the calibrated per-label thresholds) is given.

        Labels the model never saw (names not in its vocabulary, or columns of a sparse ``Y`` beyond
        its labels) still count as true labels that it misses.
        """
        self._check_fitted()
        return evaluate_predictor(self, X, Y, ks, progress, threshold)

    # -- persistence --------------------------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> str:
        """Write the model folder atomically; returns its path (:func:`xmtc.models.model_stages.save_model`)."""
        return save_model(self, folder)

    @classmethod
    def load(cls, folder: str | os.PathLike, *, mmap: bool = True) -> "XMCModel":
        model = load(folder, mmap=mmap)
        # the exact class: XRTransformer shares XRLinear's code, but an XR-Transformer folder is no XR-Linear model
        if cls is not XMCModel and type(model) is not cls:
            raise ConfigError(f"{folder}: holds a {type(model).__name__} model, not {cls.__name__}")
        return model

    @classmethod
    def _params_from_manifest(cls, reader: ModelReader) -> dict:
        from ..errors import ModelFormatError
        try:
            build_config(cls.config_class, reader.manifest["params"], source="manifest")
        except ConfigError as exc:
            raise ModelFormatError(f"{reader.folder / 'manifest.json'}: {exc}") from None
        return reader.manifest["params"]

    def _load_state(self, reader: ModelReader) -> None:
        load_model_state(self, reader)

    def _save_stages(self, writer: ModelWriter) -> list[dict]:
        raise NotImplementedError

    def _load_stages(self, reader: ModelReader) -> None:
        raise NotImplementedError


