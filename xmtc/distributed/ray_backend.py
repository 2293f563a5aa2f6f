"""XR-Linear training and batch prediction as Ray tasks (``xmtc train/predict ... --ray auto | local:N``).

Why Ray and not a scheduler of our own: users who outgrow one machine already run Ray clusters;
Ray's object store shares X and Y with every worker once (numpy arrays are read zero-copy from
shared memory), and Ray retries a task whose worker died. What xmtc adds is only the decomposition.
With teacher-forced negatives (``tfn``) :mod:`xmtc.linear.subtrees` cuts the label tree into subtrees
whose weights do not depend on each other, so

* the driver builds the whole tree (TF-IDF, PIFA, k-means: not distributed; at 1M labels 41% of the
  time, see docs/guides/ray.md) and trains the levels above the cut;
* each subtree is one task, submitted largest first, training on the rows that have a label in it
  (one thread per task: Ray's CPUs are the parallelism, on whichever nodes have them free); it returns
  its weights (CSC arrays) through Ray's object store, so no storage has to be shared between nodes;
* the driver fetches the weights task by task (copying each out of the object store, which then frees it),
  joins them into the usual model and saves it as any model is saved. It logs how many tasks ran on
  which node.

With matcher-aware negatives (``man``, ``tfn+man``: XR-Transformer's rankers) no subtree is independent
(the beam couples them), so :mod:`xmtc.linear.levelwise` trains level after level: the driver builds
each level's mask from the beam, the level's parents are cut into groups, each group is a task, and
the driver joins them and runs the beam step for the next level.

Either way the result is the model the plain fit gives, byte for byte once saved, whatever the number of
workers (see :mod:`xmtc.linear.subtrees` for why). A task that raises is not retried (the same
input would fail again) and its error is reported with the subtree it was training; a worker that
dies (killed, out of memory) is retried by Ray up to ``MAX_RETRIES`` times.

Prediction cuts the inputs into chunks; each task loads the model (memory-mapped, once per worker
process) from the folder, which therefore must be on storage every node can read (training needs none).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import ConfigError, XmtcError

log = logging.getLogger(__name__)

MAX_RETRIES = 3
# Training tasks are few and coarse (4 per CPU) and each holds its rows of X and its weights: spread them over
# the nodes (memory as well as cores) rather than Ray's default, which fills the driver's node first and, with
# tasks that finish quickly, can keep every one of them there
SPREAD = "SPREAD"
INSTALL_HINT = "pip install 'xmtc[ray]' (or: pip install ray)"


def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError(f"--ray needs the Ray package, which is not installed; install it with {INSTALL_HINT}"
                          ) from None
    return ray


def parse_spec(spec: str) -> tuple[str | None, int | None]:
    """``auto`` -> (address, None): join the cluster at RAY_ADDRESS or the one ``ray start`` runs here;
    ``local:N`` -> (None, N): start a private local Ray with N worker CPUs."""
    spec = (spec or "").strip()
    if spec == "auto":
        return os.environ.get("RAY_ADDRESS") or "auto", None
    if spec.startswith("local:"):
        try:
            n = int(spec[6:])
        except ValueError:
            n = 0
        if n >= 1:
            return None, n
    raise ConfigError(f"--ray must be 'auto' or 'local:N' with N >= 1 workers, got {spec!r}")


class RaySession:
    """``with RaySession(spec) as s:`` connects to (or starts) Ray; ``s.workers`` is the CPU count.

    A Ray that was already initialised in this process (a notebook, a test fixture) is used as is and
    left running; one started here is shut down on exit.
    """

    def __init__(self, spec: str):
        self.address, self.cpus = parse_spec(spec)
        self.ray = import_ray()
        self._started = False

    def __enter__(self) -> RaySession:
        ray = self.ray
        if not ray.is_initialized():
            kw = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
            try:
                if self.address is None:
                    ray.init(num_cpus=self.cpus, **kw)
                else:
                    ray.init(address=self.address, **kw)
            except ConnectionError as exc:
                raise ConfigError(f"cannot connect to a Ray cluster at {self.address!r} ({exc}); start one with"
                                  " `ray start --head` or use --ray local:N") from None
            except Exception as exc:  # noqa: BLE001 - Ray's start-up failures are plain Exceptions
                ray.shutdown()
                raise XmtcError(f"Ray did not start ({_short(exc)})") from None
            self._started = True
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        return self

    def __exit__(self, *exc) -> None:
        if self._started:
            self.ray.shutdown()


# ------------------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------------------
def _csr_parts(M: sp.csr_matrix) -> dict:
    return {"data": M.data, "indices": M.indices, "indptr": M.indptr, "shape": M.shape}


def _csr(parts: dict) -> sp.csr_matrix:
    return sp.csr_matrix((parts["data"], parts["indices"], parts["indptr"]), shape=parts["shape"], copy=False)


def _weight_parts(weights: list[sp.csc_matrix]) -> list[tuple]:
    """A task's weights as plain arrays for the object store, in the dtypes a saved model has."""
    return [(np.ascontiguousarray(W.data, dtype=np.float32), np.ascontiguousarray(W.indices, dtype=np.int32),
             np.ascontiguousarray(W.indptr, dtype=np.int64), tuple(int(x) for x in W.shape)) for W in weights]


def _weights(parts: list[tuple]) -> list[sp.csc_matrix]:
    """The driver's own copy of a task's weights (what Ray returns is a read-only view of its object store)."""
    return [sp.csc_matrix((np.array(d), np.array(i), np.array(p)), shape=shape) for d, i, p, shape in parts]


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def _train_task(x_parts, y_parts, parents, shapes, root, depth, nodes, solver_kw):
    """One subtree (runs in a Ray worker, on any node): train it; return its weights and the node's id."""
    from ..linear.subtrees import Subtree, train_subtree

    chain = [sp.csr_matrix((np.ones(p.size, dtype=np.float32), p, np.arange(p.size + 1)), shape=s)
             for p, s in zip(parents, shapes)]
    sub = Subtree(root=root, depth=depth, nodes=list(nodes))
    weights = train_subtree(_csr(x_parts), _csr(y_parts), chain, sub, **solver_kw)
    return _weight_parts(weights), _node_id()


def _group_task(x_parts, y_parts, a_parts, parent_of, parents, solver_kw):
    """One level's parent group (runs in a Ray worker, on any node): train its children; return their weights
    and the node's id."""
    from ..linear.levelwise import train_group

    W = train_group(_csr(x_parts), _csr(y_parts), parent_of, _csr(a_parts), parents, **solver_kw)
    return _weight_parts([W]), _node_id()


def _gather(ray, futures: list, names: list[str]) -> list[list[sp.csc_matrix]]:
    """Every task's weights, in submission order; the first failed task stops the rest and is named.
    Each result is copied out and its reference dropped (``futures`` is cleared in place) as it arrives,
    so the object store holds only the results not yet fetched."""
    index = {f: i for i, f in enumerate(futures)}
    out = [None] * len(futures)
    nodes: Counter = Counter()
    pending = list(futures)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ref = done.pop()
            i = index.pop(ref)
            futures[i] = None
            try:
                parts, node = ray.get(ref)
            except ray.exceptions.RayError as exc:
                raise XmtcError(f"Ray task for {names[i]} failed: {_short(exc)}") from None
            del ref
            out[i] = _weights(parts)
            nodes[node] += 1
    finally:
        for f in pending:
            ray.cancel(f, force=True)
    log.info("ray: %d tasks ran on %d node(s): %s", len(out), len(nodes),
             ", ".join(f"{n[:8]} {c}" for n, c in sorted(nodes.items())))
    return out


def _ready() -> str:
    """A first task on a node: starts a worker for this job there and imports what the training tasks import."""
    from ..linear import levelwise, subtrees  # noqa: F401 - imported for the later tasks' sake

    return _node_id()


def warm_workers(session: RaySession, timeout: float = 120.0) -> None:
    """Start one worker on every node with a CPU before the work is cut, and wait for them (up to ``timeout``).

    Ray binds a worker process to the job and starts it when a task first needs one; the driver's node has
    workers started for the job at once, the other nodes start theirs (a Python process importing numpy,
    scipy and xmtc: seconds) only when a task is sent there. Meanwhile the driver's node takes the queue task
    after task, so a fit whose tasks are short could finish before another node has a worker at all. With a
    warm worker on every node, the tasks spread from the first one; the start-up cost is what the tasks would
    have paid anyway, paid on all nodes at once."""
    ray = session.ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    t0 = time.perf_counter()
    nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
    task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_ready)
    futures = [task.options(name="xmtc worker start", scheduling_strategy=NodeAffinitySchedulingStrategy(
        node, soft=True)).remote() for node in nodes]
    ready, pending = ray.wait(futures, num_returns=len(futures), timeout=timeout)
    for f in pending:  # a node that cannot start a worker in time: the tasks go where workers are
        ray.cancel(f, force=True)
    log.info("ray: workers started on %d of %d node(s) in %.1fs", len(ready), len(nodes), time.perf_counter() - t0)


def ray_runner(session: RaySession):
    """A ``run_tasks`` for :func:`xmtc.linear.subtrees.fit_by_subtrees` that runs each subtree as a Ray task."""
    ray = session.ray
    task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, scheduling_strategy=SPREAD)(_train_task)

    def run(X, Y, chain, subtrees, solver_kw):
        t0 = time.perf_counter()
        x_ref, y_ref = ray.put(_csr_parts(X)), ray.put(_csr_parts(sp.csr_matrix(Y)))
        parents = [np.asarray(C.indices, dtype=np.int64) for C in chain]
        shapes = [C.shape for C in chain]
        p_ref = ray.put(parents)
        kw = dict(solver_kw, n_threads=1)
        futures = []
        for s in subtrees:  # already largest first: Ray starts them in submission order
            futures.append(task.options(name=f"xmtc {s.name()}").remote(
                x_ref, y_ref, p_ref, shapes, s.root, s.depth, s.nodes, kw))
        log.info("ray: %d subtree tasks submitted on %d CPUs (put X, Y in %.1fs)", len(futures), session.workers,
                 time.perf_counter() - t0)
        return _gather(ray, futures, [s.name() for s in subtrees])

    return run


def ray_level_runner(session: RaySession):
    """A ``run_tasks`` for :func:`xmtc.linear.levelwise.fit_by_levels`: each parent group of a level is a
    Ray task; X goes to the object store once, each level's targets and mask once per level."""
    ray = session.ray
    task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, scheduling_strategy=SPREAD)(_group_task)
    shared: dict = {}

    def run(X, targets, parent_of, active, groups, solver_kw, level):
        if shared.get("X") is not X:
            shared.clear()
            shared.update(X=X, ref=ray.put(_csr_parts(X)))
        y_ref = ray.put(_csr_parts(sp.csr_matrix(targets)))
        a_ref = ray.put(_csr_parts(sp.csr_matrix(active)))
        p_ref = ray.put(np.asarray(parent_of, dtype=np.int64))
        kw = dict(solver_kw, n_threads=1)
        names = [f"group {i} of level {level} (parents {g[0]}..{g[-1]}, {g.size} of them)"
                 for i, g in enumerate(groups)]
        futures = [task.options(name=f"xmtc {name}").remote(shared["ref"], y_ref, a_ref, p_ref, g, kw)
                   for name, g in zip(names, groups)]
        return [parts[0] for parts in _gather(ray, futures, names)]

    return run


def _short(exc: BaseException) -> str:
    """The last line of a Ray error (the original exception), not its multi-line traceback."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


def linear_fit(spec: str):
    """The ``linear_fit`` hook of :meth:`xmtc.methods.xr_linear.estimator.XRLinear.fit` for ``--ray SPEC``: with
    ``negatives="tfn"`` the tree is cut into subtree tasks (:mod:`xmtc.linear.subtrees`); with matcher-aware
    negatives each level is cut into parent-group tasks, level after level (:mod:`xmtc.linear.levelwise`).
    The tasks' weights come back through Ray's object store: nothing is written to disk until the driver
    saves the model."""
    def fit(X, Y, tree, *, negatives, beam_size, progress, **solver_kw):
        from ..linear.hierarchy import HierarchicalLinearModel, chain_of
        from ..linear.levelwise import fit_by_levels
        from ..linear.subtrees import fit_by_subtrees

        if len(chain_of(tree)) == 1:  # a flat tree (labels <= max_leaf_size): one level, nothing to cut
            log.info("ray: the label tree is flat; training it here")
            return HierarchicalLinearModel().fit(X, Y, tree, negatives=negatives, beam_size=beam_size,
                                                 progress=progress, **solver_kw)

        with RaySession(spec) as session:
            warm_workers(session)
            if negatives == "tfn":
                return fit_by_subtrees(X, Y, tree, workers=session.workers, negatives=negatives,
                                       beam_size=beam_size, progress=progress, run_tasks=ray_runner(session),
                                       **solver_kw)
            return fit_by_levels(X, Y, tree, workers=session.workers, negatives=negatives, beam_size=beam_size,
                                 progress=progress, run_tasks=ray_level_runner(session), **solver_kw)

    return fit


# ------------------------------------------------------------------------------------------------------
# prediction
# ------------------------------------------------------------------------------------------------------
_MODELS: dict[str, object] = {}


def _predict_task(model_dir: str, inputs, k: int):
    """Top-k of one chunk (runs in a Ray worker; the model is loaded once per worker process)."""
    from ..models import load

    # keyed by the manifest's identity too: a model saved again at the same path is a new model
    st = os.stat(Path(model_dir) / "manifest.json")
    key = f"{model_dir}\0{st.st_ino}\0{st.st_mtime_ns}"
    model = _MODELS.get(key)
    if model is None:
        _MODELS.clear()
        model = _MODELS[key] = load(model_dir)
    return model.predict_topk(inputs, k)


class RayPredictor:
    """``predict_topk`` of a saved model, computed by Ray tasks over chunks of the inputs, in input order."""

    def __init__(self, model, model_dir: str | os.PathLike, spec: str, chunk: int = 4096):
        self.model = model
        self.labels_ = model.labels_
        self.model_dir = str(Path(model_dir).resolve())
        self.spec = spec
        self.chunk = int(chunk)

    def known_fraction(self, inputs):
        """The wrapped model's share of known words per text (computed here; it is cheap)."""
        return self.model.known_fraction(inputs)

    def predict_topk(self, inputs, k: int = 5, *, progress: bool = False):
        n = inputs.shape[0] if sp.issparse(inputs) else len(inputs)
        if n == 0:
            return self.model.predict_topk(inputs, k)
        with RaySession(self.spec) as session:
            ray = session.ray
            task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_predict_task)
            starts = list(range(0, n, self.chunk)) or [0]
            futures = [task.remote(self.model_dir, inputs[s:s + self.chunk], int(k)) for s in starts]
            parts = []
            for s, f in zip(starts, futures):
                try:
                    parts.append(ray.get(f))
                except ray.exceptions.RayError as exc:
                    raise XmtcError(f"Ray task predicting inputs {s + 1}..{min(s + self.chunk, n)} failed:"
                                    f" {_short(exc)}") from None
        if not parts:
            return np.zeros((0, k), dtype=np.int32), np.zeros((0, k), dtype=np.float32)
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
