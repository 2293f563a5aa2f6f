"""What ``xmtc train`` says when it ends and the model is not what a user would assume.

A model fitted on a handful of documents keeps raw scores (no validation split to fit the score maps on),
and then scores an unknown text 0.6 on a scale nobody can read; without a line at the end of training,
nothing said so.
"""

from __future__ import annotations


def raw_scores_notice(model, n: int, valid_size: float | None) -> str | None:
    """Why a model fitted by :func:`xmtc.models.calibrated_fit.fit_calibrated` kept raw scores; ``None`` when
    it is calibrated (or is a torchrun worker that does not save)."""
    from ..models.calibrated_fit import AUTO_MIN_DOCS

    if getattr(model, "calibration_", None) is not None or not getattr(model, "is_main_process_", True):
        return None
    if n < AUTO_MIN_DOCS and (valid_size is None or "valid_size" in model.get_params()):
        why = (f"{n:,} training documents are fewer than the {AUTO_MIN_DOCS} from which a tenth is held out"
               " to calibrate them on")
    else:
        why = "the validation split is empty (--valid-size 0)"
    return (f"the scores of this model are raw, not calibrated probabilities: {why}; `xmtc calibrate MODEL"
            " LABELLED_FILE` fits the score maps later")
