"""``xmtc tune``: train's split, a --config that train accepts, resuming, one-line errors, the metrics."""

import gzip
import json

import numpy as np
import pytest
import scipy.sparse as sp

optuna = pytest.importorskip("optuna", reason="the tune extra is not installed")

from xmtc.cli import main  # noqa: E402
from xmtc.data import read_datasets, sample_path  # noqa: E402
from xmtc.data.split import split_dataset  # noqa: E402
from xmtc.methods.xr_linear.config import XRLinearConfig  # noqa: E402
from xmtc.methods.xr_linear.estimator import XRLinear  # noqa: E402
from xmtc.metrics import evaluate  # noqa: E402
from xmtc.models import load  # noqa: E402
from xmtc.models.calibrated_fit import auto_valid_size  # noqa: E402
from xmtc.tuning.objective import TrialRunner, doc_stats, metric_value, parse_metric  # noqa: E402
from xmtc.tuning.space import build_space, default_space  # noqa: E402

# a small, fast space: two trials of it take about a second on 600 titles
FAST = ["--no-default-space", "--param", "C_pos=0.5..2:log", "--param", "n_trees=1", "--param", "min_df=1,2"]


@pytest.fixture(scope="module")
def train_file(tmp_path_factory):
    """The first 600 titles of the bundled sample: enough for train's automatic split (60 documents)."""
    path = tmp_path_factory.mktemp("tune") / "train.txt.gz"
    with gzip.open(sample_path("train"), "rt", encoding="utf-8") as src, gzip.open(path, "wt", encoding="utf-8") as dst:
        for i, line in enumerate(src):
            if i == 600:
                break
            dst.write(line)
    return str(path)


def _tune(train_file, out, *extra):
    return main(["tune", train_file, "-o", str(out), "-q", *extra])


@pytest.mark.parametrize("seed", [0, 3])
def test_validation_part_is_the_one_train_holds_out(train_file, seed):
    ds = read_datasets([train_file])
    runner = TrialRunner(XRLinear, ds, parse_metric("P@1"), seed=seed)
    train, valid = split_dataset(ds, auto_valid_size(len(ds)), seed)
    assert len(runner.valid) == auto_valid_size(len(ds)) == 60
    assert runner.valid.texts == valid.texts and runner.train.texts == train.texts
    assert (runner.valid.Y != valid.Y).nnz == 0


def test_best_json_is_a_config_train_accepts(train_file, tmp_path, capsys):
    best = tmp_path / "best.json"
    assert _tune(train_file, best, "--trials", "2", *FAST) == 0
    out = capsys.readouterr().out
    assert "(defaults)" in out and "chosen:" in out
    config = json.loads(best.read_text())
    assert config["method"] == "xr-linear" and set(config) == {"method", "C_pos", "n_trees", "min_df"}
    model_dir = tmp_path / "model"
    assert main(["train", train_file, "--config", str(best), "-o", str(model_dir), "-q"]) == 0
    params = load(str(model_dir)).get_params()
    assert all(params[k] == v for k, v in config.items() if k != "method")


def test_defaults_are_kept_unless_a_trial_beats_them_beyond_noise(train_file, tmp_path, capsys):
    best = tmp_path / "best.json"
    assert _tune(train_file, best, "--trials", "3", "--noise-z", "1e9", *FAST) == 0
    # n_trees=1 is fixed (one value): the defaults' trial runs with it too
    assert json.loads(best.read_text()) == {"method": "xr-linear", "n_trees": 1, "C_pos": 1.0, "min_df": 2}
    assert "chosen: the defaults" in capsys.readouterr().out


def test_resume_adds_trials_to_the_stored_study(train_file, tmp_path):
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    for _ in range(2):
        assert _tune(train_file, tmp_path / "best.json", "--trials", "2", "--storage", storage,
                     "--study-name", "s", *FAST) == 0
    study = optuna.load_study(study_name="s", storage=storage)
    assert [t.number for t in study.trials] == [0, 1, 2, 3]
    assert sum(bool(t.user_attrs.get("xmtc_default")) for t in study.trials) == 1
    # the resumed run's sampler is seeded anew: it does not draw the first run's trials again
    assert study.trials[3].params != study.trials[1].params
    assert _tune(train_file, tmp_path / "b.json", "--trials", "1", "--storage", storage, "--study-name", "s",
                 "--metric", "P@5", *FAST) == 2  # another metric's scores cannot join the study


@pytest.mark.parametrize("args, message", [
    (["--param", "no_such=1..2"], "unknown parameter 'no_such'"),
    (["--param", "n_trees=a,b"], "'n_trees' expects int"),
    (["--param", "C_pos=0.5..x"], "'C_pos' expects float"),
    (["--param", "C_pos=0..1:log"], "'C_pos' must be > 0.0"),
    (["--param", "ngram_max=1..9"], "'ngram_max' must be <= 5"),
    (["--param", "C_pos=2..1"], "LOW must be below HIGH"),
    (["--param", "C_pos"], "expected NAME=LOW..HIGH"),
    (["--param", "sublinear_tf=0..1"], "give its values as a,b,c"),
    (["--metric", "P@0"], "--metric 'P@0'"),
    (["--metric", "F1@2"], "probability in [0, 1]"),
])
def test_bad_input_is_a_one_line_error(train_file, tmp_path, capsys, args, message):
    assert _tune(train_file, tmp_path / "best.json", "--trials", "1", *args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("xmtc: error:") and "\n" not in err and message in err, err
    assert not (tmp_path / "best.json").exists()


def test_a_label_file_without_names_or_texts_is_named(train_file, tmp_path, capsys):
    """As train: the label file is named, not blamed on the training file after the defaults' fit."""
    counts = tmp_path / "counts.tsv"
    with gzip.open(train_file, "rt", encoding="utf-8") as fh:
        ids = sorted({label for line in fh for label in line.split("\t", 1)[0].split(",")})
    counts.write_text("".join(f"{label}\t12\t3\n" for label in ids), encoding="utf-8")
    assert _tune(train_file, tmp_path / "best.json", "--trials", "1", "--label-file", str(counts)) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"xmtc: error: {counts}: gives none of the {len(ids)} labels of the training data a name or"
                   " text (only ids, or ids and numbers): a label file is 'id, name[, text]' or columns named by a"
                   " '#' header line; leave --label-file out to train without label texts")
    assert not (tmp_path / "best.json").exists()


def test_a_length_is_required(train_file, tmp_path, capsys):
    assert _tune(train_file, tmp_path / "best.json") == 2
    assert "--trials N, --time-budget" in capsys.readouterr().err
    assert _tune(train_file, tmp_path / "best.json", "--trials", "1", "--no-default-space", "--param", "n_trees=1") == 2
    assert "nothing is left to search" in capsys.readouterr().err


def test_default_space_is_valid_and_holds_most_defaults():
    space = default_space(XRLinearConfig)
    assert {"C_pos", "C_neg", "ngram_max", "min_df", "max_leaf_size", "beam_size", "n_trees"} <= set(space)
    defaults = XRLinearConfig()
    inside = [n for n, d in space.items() if d.contains(getattr(defaults, n))]
    assert set(space) - set(inside) == {"n_trees"}  # 0 (auto) runs as it is in the defaults' trial
    assert build_space(XRLinearConfig, ["C_pos=1,2"])["C_pos"].choices == (1.0, 2.0)


def test_features_are_computed_once_per_featurization(train_file):
    runner = TrialRunner(XRLinear, read_datasets([train_file]), parse_metric("P@1"), fixed={"n_trees": 1})
    runner.run({"C_pos": 1.0})
    runner.run({"C_pos": 2.0, "beam_size": 5})
    assert runner.featurizations == 1
    runner.run({"ngram_max": 1})
    assert runner.featurizations == 2
    f1 = TrialRunner(XRLinear, read_datasets([train_file]), parse_metric("F1@0.3"), fixed={"n_trees": 1})
    assert f1.run({}).shape == (60, 3)  # true positives, false positives, false negatives per document


@pytest.mark.parametrize("name", ["P@1", "P@5", "R@5", "nDCG@5", "F1@0.4"])
def test_per_document_stats_give_the_evaluate_metric(name):
    rng = np.random.default_rng(0)
    Y = sp.csr_matrix((rng.random((50, 30)) < 0.08).astype(np.float32))
    idx = np.argsort(-rng.random((50, 30)), axis=1)[:, :5].astype(np.int32)
    scores = np.sort(rng.random((50, 5)), axis=1)[:, ::-1].astype(np.float32)
    metric = parse_metric(name)
    got = metric_value(metric, doc_stats(metric, Y, idx, scores))
    want = evaluate(Y, (idx, scores), ks=(5,) if metric.k == 5 else (1,), threshold=metric.threshold)
    assert got == pytest.approx(want["F1@T" if metric.kind == "F1" else name])


def test_a_configuration_drawn_twice_is_not_fitted_twice(train_file, tmp_path):
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    assert _tune(train_file, tmp_path / "best.json", "--trials", "5", "--storage", storage, "--no-default-space",
                 "--param", "min_df=1,2", "--param", "n_trees=1") == 0
    trials = optuna.load_study(study_name="xr-linear", storage=storage).trials
    assert len({tuple(t.params.items()) for t in trials}) <= 2  # the defaults' min_df=2 and min_df=1
    repeats = [t for t in trials if "repeat_of" in t.user_attrs]
    assert len(repeats) >= 3 and all(t.value == trials[t.user_attrs["repeat_of"]].value for t in repeats)
