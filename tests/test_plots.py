"""Plots: the numbers behind them by hand, and the CLI writes real PNGs."""

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("matplotlib")

import xmtc  # noqa: E402
from xmtc.cli import main  # noqa: E402
from xmtc.metrics import hits_matrix  # noqa: E402
from xmtc.plots import decile_of_labels, precision_by_decile  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def test_deciles_and_precision_by_decile_by_hand():
    counts = np.array([50, 1, 7, 3, 9, 2, 40, 5, 6, 8])  # 10 labels: one per decile, rarest first
    dec = decile_of_labels(counts, 12)                   # labels 10, 11 only in test: count 0
    # 12 labels sorted by count: 10(0), 11(0), 1(1), 5(2), 3(3), 7(5), 8(6), 2(7), 9(8), 4(9), 6(40), 0(50)
    # decile = rank * 10 // 12
    order = [10, 11, 1, 5, 3, 7, 8, 2, 9, 4, 6, 0]
    assert [dec[j] for j in order] == [r * 10 // 12 for r in range(12)]
    Y = sp.csr_matrix(([1, 1, 1], ([0, 0, 1], [0, 1, 0])), shape=(2, 12))
    idx = np.array([[0, 6], [1, 0]])
    prec, rec, n_pred, n_true = precision_by_decile(Y, idx, hits_matrix(Y, idx), dec)
    # label 0 (decile 9): suggested twice, right once (doc 0), right in doc 1 too -> 2/2
    # label 6 (decile 8): suggested once, wrong ; label 1 (decile 1): suggested for doc 1, wrong; true in doc 0, missed
    assert n_pred[9] == 2 and prec[9] == pytest.approx(100.0) and rec[9] == pytest.approx(100.0)
    assert n_pred[8] == 1 and prec[8] == 0.0
    assert n_pred[dec[1]] == 1 and prec[dec[1]] == 0.0 and n_true[dec[1]] == 1 and rec[dec[1]] == 0.0


def test_cli_evaluate_and_info_plots(reuters_small, tmp_path, capsys):
    (texts, labels), (test_texts, test_labels) = reuters_small
    model = xmtc.XRLinear(max_leaf_size=8, branching=4, n_threads=2).fit(texts[:800], labels[:800], progress=False)
    model.save(tmp_path / "m")
    (tmp_path / "test.tsv").write_text("".join(",".join(y) + "\t" + x.replace("\t", " ").replace("\n", " ") + "\n"
                                               for x, y in zip(test_texts, test_labels)))
    assert main(["evaluate", str(tmp_path / "m"), str(tmp_path / "test.tsv"), "-q", "--plot",
                 str(tmp_path / "report.png")]) == 0
    assert main(["info", str(tmp_path / "m"), "--plot", str(tmp_path / "tree.png"), "-q"]) == 0
    for name in ("report.png", "tree.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 20_000, name
    # a path whose extension matplotlib cannot write is one error line, before any work, and writes nothing
    for command in (["evaluate", str(tmp_path / "m"), str(tmp_path / "test.tsv")], ["info", str(tmp_path / "m")]):
        capsys.readouterr()
        assert main([*command, "-q", "--plot", str(tmp_path / "r.1.5")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"xmtc: error: {tmp_path / 'r.1.5'}: a plot file must end"), err
        assert ".png" in err and ".svg" in err
    # the format follows the extension and the file appears whole: nothing temporary is left beside it
    assert main(["info", str(tmp_path / "m"), "--plot", str(tmp_path / "tree.svg"), "-q"]) == 0
    assert (tmp_path / "tree.svg").read_text().lstrip().startswith("<?xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "report.png", "test.tsv", "tree.png", "tree.svg"]
