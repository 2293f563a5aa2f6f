"""``--ray``: XR-Linear trained and predicted as Ray tasks on a local 2-worker cluster, byte for byte."""

from __future__ import annotations

import gzip
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from xmtc import cli
from xmtc.errors import ConfigError, XmtcError

SAMPLE = Path(__file__).resolve().parents[1] / "xmtc" / "data" / "sample"


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """3,000 training and 300 test documents of the bundled yso-finna-en sample (seeded pick)."""
    folder = tmp_path_factory.mktemp("sample")
    rng = np.random.default_rng(0)
    for name, n in (("train", 3000), ("test", 300)):
        with gzip.open(SAMPLE / f"{name}.txt.gz", "rt", encoding="utf-8") as fh:
            lines = fh.readlines()
        keep = np.sort(rng.choice(len(lines), size=n, replace=False))
        (folder / f"{name}.txt").write_text("".join(lines[i] for i in keep), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        except Exception:  # noqa: BLE001 - Ray gives its raylet 30 s to start; a loaded machine can miss that once
            ray.shutdown()
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_train_with_ray_gives_the_same_model_folder(sample, tmp_path, ray_cluster, capsys):
    # max_leaf_size 30 makes a 3-level tree of the sample's labels, cut into subtrees
    args = ["train", str(sample / "train.txt"), "--max-leaf-size", "30", "-q", "--n-threads", "2"]
    assert cli.main([*args, "-o", str(tmp_path / "plain")]) == 0
    capsys.readouterr()
    assert cli.main([*args, "-o", str(tmp_path / "ray"), "--ray", "local:2", "--log-level", "INFO"]) == 0
    log_text = capsys.readouterr().err
    # Ray really trained it: one task per node at the cut level of the plain model's tree
    cut = int(re.search(r"subtrees below level (\d+)", log_text).group(1))
    sizes = json.loads(re.search(r"levels (\[[\d, ]+\])", log_text).group(1))
    assert f"ray: {sizes[cut - 1]} subtree tasks submitted" in log_text
    plain, ray = _files(tmp_path / "plain"), _files(tmp_path / "ray")
    assert sorted(plain) == sorted(ray)
    for name in plain:
        assert plain[name] == ray[name], name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain", "ray"]  # the weights came back through Ray


def test_predict_with_ray_writes_the_same_file(sample, tmp_path, ray_cluster):
    model = tmp_path / "m"
    assert cli.main(["train", str(sample / "train.txt"), "-o", str(model), "-q"]) == 0
    assert cli.main(["predict", str(model), str(sample / "test.txt"), "-o", str(tmp_path / "plain.jsonl"), "-q"]) == 0
    from xmtc.distributed import ray_backend

    old = ray_backend.RayPredictor.__init__.__defaults__
    ray_backend.RayPredictor.__init__.__defaults__ = (70,)  # several chunks, the last one short
    try:
        assert cli.main(["predict", str(model), str(sample / "test.txt"), "-o", str(tmp_path / "ray.jsonl"), "-q",
                         "--ray", "local:2"]) == 0
    finally:
        ray_backend.RayPredictor.__init__.__defaults__ = old
    plain = (tmp_path / "plain.jsonl").read_bytes()
    assert plain.count(b"\n") == 300
    assert (tmp_path / "ray.jsonl").read_bytes() == plain


@pytest.mark.slow
def test_a_worker_that_dies_is_retried_and_the_model_is_unchanged(sample, tmp_path, ray_cluster, monkeypatch):
    """The first subtree task to start kills its own worker process (as the OOM killer or a lost node would);
    Ray runs it again, and the model folder is byte for byte the plain run's."""
    from xmtc.distributed import ray_backend

    args = ["train", str(sample / "train.txt"), "--max-leaf-size", "30", "-q", "--n-threads", "2"]
    assert cli.main([*args, "-o", str(tmp_path / "plain")]) == 0
    died, attempts = str(tmp_path / "died"), str(tmp_path / "attempts")
    original = ray_backend._train_task

    def dies_once(*task_args):  # a closure: Ray ships it by value, and `original` by reference
        import os

        with open(attempts, "a") as fh:
            fh.write("x")
        try:
            fd = os.open(died, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return original(*task_args)
        os.close(fd)
        os._exit(9)

    monkeypatch.setattr(ray_backend, "_train_task", dies_once)
    assert cli.main([*args, "-o", str(tmp_path / "ray"), "--ray", "local:2"]) == 0
    assert Path(died).exists()
    n_tasks = len(Path(attempts).read_text())
    plain, ray = _files(tmp_path / "plain"), _files(tmp_path / "ray")
    assert sorted(plain) == sorted(ray) and all(plain[n] == ray[n] for n in plain)
    assert n_tasks >= 3  # at least two subtrees plus the one retry


def test_a_failing_subtree_task_is_named(ray_cluster):
    import scipy.sparse as sp

    from xmtc.distributed.ray_backend import RaySession, ray_runner
    from xmtc.linear.subtrees import Subtree

    X = sp.csr_matrix(np.eye(4, dtype=np.float32))
    Y = sp.csr_matrix(np.eye(4, dtype=np.float32))
    chain = [sp.csr_matrix(np.ones((2, 1), dtype=np.float32)),
             sp.csr_matrix(np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=np.float32))]
    broken = Subtree(root=1, depth=1, nodes=[np.array([2, 3]), ])  # one level short: the task fails
    broken.nodes.append(np.array([99]))  # a label that does not exist
    with RaySession("local:2") as session:
        run = ray_runner(session)
        with pytest.raises(XmtcError, match=r"Ray task for subtree 1 of level 1 \(1 labels\) failed: IndexError"):
            run(X, Y, chain, [broken], {"C_pos": 1.0})


@pytest.mark.slow
def test_matcher_aware_negatives_train_level_by_level_on_ray_and_give_the_same_model_folder(sample, tmp_path,
                                                                                            ray_cluster, capsys):
    args = ["train", str(sample / "train.txt"), "--max-leaf-size", "30", "--negatives", "tfn+man", "-q",
            "--n-threads", "2"]
    assert cli.main([*args, "-o", str(tmp_path / "plain")]) == 0
    capsys.readouterr()
    assert cli.main([*args, "-o", str(tmp_path / "ray"), "--ray", "local:2", "--log-level", "INFO"]) == 0
    log_text = capsys.readouterr().err
    tasks = [int(x) for x in re.findall(r"level \d+/\d+: \d+ nodes in (\d+) tasks", log_text)]
    assert len(tasks) >= 3 and tasks[0] == 1 and max(tasks) == 8, log_text[-2000:]  # 4 groups per worker below
    plain, ray = _files(tmp_path / "plain"), _files(tmp_path / "ray")
    assert sorted(plain) == sorted(ray)
    for name in plain:
        assert plain[name] == ray[name], name


def test_a_failing_level_group_task_is_named(ray_cluster):
    import scipy.sparse as sp

    from xmtc.distributed.ray_backend import RaySession, ray_level_runner

    X = sp.csr_matrix(np.eye(4, dtype=np.float32))
    Y = sp.csr_matrix(np.eye(4, dtype=np.float32))
    active = sp.csr_matrix(np.ones((4, 2), dtype=np.float32))
    with RaySession("local:2") as session:
        run = ray_level_runner(session)
        with pytest.raises(XmtcError, match=r"Ray task for group 0 of level 1 \(parents 0..1, 2 of them\) failed:"
                                            r" ConfigError: unknown solver settings"):
            run(X, Y, np.array([0, 0, 1, 1]), active, [np.array([0, 1])], {"no_such": 1}, 1)


@pytest.mark.slow
def test_xr_transformer_rankers_with_ray_equal_the_plain_fit(sample, tiny_bert, tmp_path, ray_cluster, capsys):
    """XR-Transformer's linear matcher and rankers on [tfidf, embedding], with its default matcher-aware negatives
    (tfn+man), trained as Ray tasks level by level equal, array for array, the plain fit of the same features
    (fine-tuning itself is not repeated); and `xmtc train --ray` takes that path."""
    import xmtc
    from xmtc.distributed.ray_backend import linear_fit as ray_linear_fit
    from xmtc.methods.xr_linear.estimator import plain_linear_fit

    lines = (sample / "train.txt").read_text().splitlines(keepends=True)[:600]
    labels = [ln.split("\t", 1)[0].split(",") for ln in lines]
    texts = [ln.rstrip("\n").split("\t", 1)[1] for ln in lines]
    params = dict(encoder=tiny_bert, matcher="linear", max_leaf_size=30, branching=4, max_length=16, epochs=1,
                  n_threads=2)
    seen = {}
    ray_fit = ray_linear_fit("local:2")

    def spy(X, Y, tree, **kw):
        seen.update(X=X, Y=Y, tree=tree, kw=kw)
        return ray_fit(X, Y, tree, **kw)

    model = xmtc.XRTransformer(**params).fit(texts, labels, progress=False, linear_fit=spy)
    assert seen["X"].shape[1] == model.n_features_  # the [tfidf, embedding] features
    assert seen["kw"]["negatives"] == "tfn+man"
    plain = plain_linear_fit(seen["X"], seen["Y"], seen["tree"], **seen["kw"]).to_arrays(layout="beam")
    got = model.models_[0].to_arrays(layout="beam")
    assert sorted(plain) == sorted(got)
    for key in plain:
        assert np.array_equal(plain[key], got[key]), key

    small = tmp_path / "train.txt"
    small.write_text("".join(lines))
    argv = ["train", str(small), "-o", str(tmp_path / "cli"), "--method", "xr-transformer", "--matcher", "linear",
            "--encoder", tiny_bert, "--max-leaf-size", "30", "--branching", "4",
            "--max-length", "16", "--epochs", "1", "--n-threads", "2", "-q", "--ray", "local:2", "--log-level", "INFO"]
    capsys.readouterr()
    assert cli.main(argv) == 0
    assert re.search(r"level 2/\d+: \d+ nodes in \d+ tasks", capsys.readouterr().err)
    assert len(xmtc.load(tmp_path / "cli").predict(texts[:2], k=3)[0]) == 3


@pytest.mark.parametrize("extra,msg", [(["--matcher", "neural", "--negatives", "tfn"], "matcher 'neural' trains its own"),
                                       (["--method", "lightxml"], "method 'lightxml' is not supported")])
def test_ray_refuses_what_it_cannot_cut_before_training(sample, tmp_path, capsys, extra, msg):
    argv = ["train", str(sample / "train.txt"), "-o", str(tmp_path / "m"), "--method", "xr-transformer", "--ray",
            "local:2", "-q"]
    if extra[:1] == ["--method"]:
        argv[argv.index("xr-transformer")] = extra[1]
        extra = []
    t0 = time.perf_counter()
    rc = cli.main([*argv, *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and msg in err[0], err
    assert time.perf_counter() - t0 < 10  # refused up front, not after fine-tuning
    assert not (tmp_path / "m").exists()


def test_ray_flag_without_ray_installed_is_one_line(monkeypatch, capsys, sample, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert cli.main(["train", str(sample / "train.txt"), "-o", str(tmp_path / "m"), "-q", "--ray", "local:2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xmtc: error: --ray needs the Ray package") and "pip install" in err[0]
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("spec", ["local:0", "local:x", "cluster", ""])
def test_bad_ray_spec(spec):
    from xmtc.distributed.ray_backend import parse_spec

    with pytest.raises(ConfigError, match="auto' or 'local:N'"):
        parse_spec(spec)
