"""coverage@P, ECE and F1@threshold against hand-computed cases."""

import numpy as np
import pytest
import scipy.sparse as sp

from xmtc.errors import DataFormatError
from xmtc.metrics import coverage_at_precision, evaluate, expected_calibration_error, f1_at_threshold


def test_coverage_at_precision_by_hand():
    s = np.array([0.9, 0.8, 0.8, 0.7, 0.6, np.nan])   # the last document has no suggestion
    c = np.array([1, 1, 0, 1, 0, 0], dtype=bool)
    # accepting >= 0.9: 1/1 right, 1 doc ; >= 0.8: 2/3 (the tie is accepted whole), 3 docs ;
    # >= 0.7: 3/4, 4 docs ; >= 0.6: 3/5, 5 docs ; shares of all 6 documents
    assert coverage_at_precision(s, c, 0.90) == pytest.approx(100 / 6)
    assert coverage_at_precision(s, c, 1.00) == pytest.approx(100 / 6)
    assert coverage_at_precision(s, c, 0.70) == pytest.approx(400 / 6)
    assert coverage_at_precision(s, c, 0.60) == pytest.approx(500 / 6)
    assert coverage_at_precision(np.array([0.5, 0.5]), np.array([True, False]), 0.9) == 0.0


def test_ece_by_hand():
    s = np.array([0.05, 0.15, 0.15, 0.95, 1.0])
    c = np.array([0, 1, 0, 1, 1])
    # bin 0: |0 - .05| ; bin 1: |1 - .3| ; bin 9 (1.0 included): |2 - 1.95| ; over 5 suggestions
    assert expected_calibration_error(s, c) == pytest.approx(100 * (0.05 + 0.7 + 0.05) / 5)
    assert expected_calibration_error(np.array([0.25, 0.25]), np.array([0, 1]), n_bins=4) == pytest.approx(25.0)


Y = sp.csr_matrix(np.array([[1, 1, 0], [0, 0, 1]], dtype=np.float32))
IDX = np.array([[0, 2], [2, 1]])
SC = np.array([[0.9, 0.4], [0.6, 0.5]])


def test_f1_at_threshold_by_hand():
    # T = 0.5 accepts (0,0) right, (1,2) right, (1,1) wrong: TP 2, FP 1, FN 3 - 2 = 1
    assert f1_at_threshold(Y, (IDX, SC), 0.5) == pytest.approx(100 * 4 / 6)
    # per label [0.95, 0.1, 0.5]: accepts (1,2) right and (1,1) wrong: TP 1, FP 1, FN 2
    assert f1_at_threshold(Y, (IDX, SC), np.array([0.95, 0.1, 0.5])) == pytest.approx(100 * 2 / 5)
    assert f1_at_threshold(Y, (IDX, SC), 2.0) == 0.0
    with pytest.raises(DataFormatError):
        f1_at_threshold(Y, IDX, 0.5)


def test_evaluate_reports_the_score_metrics():
    out = evaluate(Y, (IDX, SC), ks=(1, 2), scores=True, threshold=0.5)
    assert list(out)[-5:] == ["coverage@P90", "coverage@P95", "ECE@2", "F1@T", "macro-F1@T"]
    # top-1: doc 0 (0.9, right), doc 1 (0.6, right): both acceptable at 100%
    assert out["coverage@P90"] == pytest.approx(100.0)
    assert out["ECE@2"] == pytest.approx(expected_calibration_error(SC.ravel(), [1, 0, 1, 0]))
    assert out["F1@T"] == pytest.approx(100 * 4 / 6)
    assert "ECE@2" not in evaluate(Y, (IDX, SC), ks=(1, 2))
