"""A save killed at any moment leaves the old model or the new one at M: never a mix, never nothing.

Two kinds of kill, both real SIGKILLs of a real ``xmtc train -o M`` process over an existing M:

* at every step of the save: a wrapper counts the file-system steps the save takes (each array
  file, JSON file, fsync, rename/exchange, delete) and kills the process just before step N, for
  every N, with the renameat2 exchange and with the portable two-rename fallback;
* at random moments of the whole run (reading, fitting, saving), from outside.

After each kill M must load and predict exactly as the old model or as the new one, and the next
save must leave no temporary folder behind.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import xmtc
from xmtc.errors import ModelFormatError
from xmtc.models import swap
from xmtc.models.storage import ModelReader, ModelWriter

ROOT = Path(__file__).resolve().parents[1]
PROBE = ["oil prices rise", "wheat and corn exports", "bank interest rates", "gold", "sugar harvest"]

# Runs the CLI with the save's steps counted; SIGKILL just before step XMTC_KILL_AT (1-based).
KILLER = r"""
import os, shutil, signal, sys
import xmtc.models.storage as storage, xmtc.models.swap as swap
at = int(os.environ["XMTC_KILL_AT"]); count = [0]
swap.USE_EXCHANGE = os.environ.get("XMTC_EXCHANGE", "1") == "1"
def counted(fn):
    def wrapper(*a, **k):
        count[0] += 1
        if count[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)
        return fn(*a, **k)
    return wrapper
storage.write_arrays = counted(storage.write_arrays)
storage.ModelWriter.json = counted(storage.ModelWriter.json)
swap.fsync_tree = counted(swap.fsync_tree)
swap.fsync_dir = counted(swap.fsync_dir)
swap._renameat2 = counted(swap._renameat2)
os.rename = counted(os.rename)
shutil.rmtree = counted(shutil.rmtree)
from xmtc.cli import main
code = main(sys.argv[1:])
print("STEPS", count[0], file=sys.stderr)
sys.exit(code)
"""


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _train(args, *, kill_at=None, exchange=True, check=True):
    cmd = [sys.executable, "-m", "xmtc.cli", "train", *map(str, args), "-q"]
    env = _env()
    if kill_at is not None:
        cmd = [sys.executable, "-c", KILLER, "train", *map(str, args), "-q"]
        env.update(XMTC_KILL_AT=str(kill_at), XMTC_EXCHANGE="1" if exchange else "0")
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def _predictions(folder):
    return xmtc.load(folder).predict_topk(PROBE, 5)


def _same(a, b) -> bool:
    return np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def _temporaries(parent: Path, name: str = "M"):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


@pytest.fixture(scope="module")
def corpora(shared_data, tmp_path_factory):
    d = shared_data / "reuters21578-apte90" / "train.txt.gz"
    if not d.exists():
        pytest.skip("shared data not available")
    import gzip
    lines = gzip.open(d, "rt", encoding="utf-8").read().splitlines()
    root = tmp_path_factory.mktemp("kill")
    old, new = root / "old.tsv", root / "new.tsv"
    old.write_text("\n".join(lines[:250]) + "\n", encoding="utf-8")
    new.write_text("\n".join(lines[250:550]) + "\n", encoding="utf-8")
    ref_old, ref_new = root / "ref_old", root / "ref_new"
    _train([old, "-o", ref_old])
    _train([new, "-o", ref_new])
    return old, new, _predictions(ref_old), _predictions(ref_new), ref_old


def _restore(ref_old: Path, M: Path) -> None:
    """Put the old model back at M (a copy: cheaper than training it again)."""
    if M.exists():
        shutil.rmtree(M)
    shutil.copytree(ref_old, M)


def _clean_up_as_next_save(M: Path) -> None:
    """What the next save to M does first; a real save is tested in the random-kill test."""
    swap.recover(M)
    assert _temporaries(M.parent) == []


@pytest.mark.slow
@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "fallback"])
def test_kill_at_every_step_of_the_save(corpora, tmp_path, exchange):
    old, new, p_old, p_new, ref_old = corpora
    M = tmp_path / "M"
    # how many steps does a whole save over an existing model take? (a run that is never killed)
    _restore(ref_old, M)
    out = _train([new, "-o", M], kill_at=10**9, exchange=exchange)
    steps = int(out.stderr.split("STEPS")[-1])
    assert steps >= 6
    seen = set()
    for n in range(1, steps + 1):
        _restore(ref_old, M)
        out = _train([new, "-o", M], kill_at=n, exchange=exchange, check=False)
        assert out.returncode == -signal.SIGKILL, out.stderr
        got = _predictions(M)  # loads (the fallback recovers a backup if M went missing)
        assert _same(got, p_old) or _same(got, p_new), f"killed before step {n}: a mix"
        seen.add("old" if _same(got, p_old) else "new")
        _clean_up_as_next_save(M)
    assert seen == {"old", "new"}  # the kills covered both sides of the swap


@pytest.mark.slow
def test_sigkill_at_random_moments(corpora, tmp_path):
    old, new, p_old, p_new, ref_old = corpora
    M = tmp_path / "M"
    _restore(ref_old, M)
    rng = random.Random(12)
    t0 = time.perf_counter()
    _train([new, "-o", tmp_path / "timing"])
    full = time.perf_counter() - t0
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-m", "xmtc.cli", "train", str(new), "-o", str(M), "-q"],
                                env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 1.1) * full)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        got = _predictions(M)
        assert _same(got, p_old) or _same(got, p_new)
    _train([old, "-o", M])  # a real save after the kills cleans whatever they left
    assert _temporaries(tmp_path) == []
    assert _same(_predictions(M), p_old)


# -- the swap and the clean-up, in process -----------------------------------------------------------
def _save(path, value):
    w = ModelWriter(path)
    f = w.arrays("a", {"x": np.full(3, value, dtype=np.float32)})
    return w.commit("test", {}, [{"name": "a", "file": f}])


def _value(path):
    return float(ModelReader(path).arrays("a.safetensors")["x"][0])


def _dead_pid() -> int:
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "fallback"])
def test_replace_dir_keeps_target_complete(tmp_path, monkeypatch, exchange):
    monkeypatch.setattr(swap, "USE_EXCHANGE", exchange)
    _save(tmp_path / "M", 1.0)
    _save(tmp_path / "M", 2.0)
    assert _value(tmp_path / "M") == 2.0
    assert _temporaries(tmp_path) == []


def test_exchange_is_what_runs_here(tmp_path):
    """On this Linux machine the atomic exchange is available (else the fallback would be tested twice)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "f").write_text("a")
    assert swap._renameat2(a, b, swap._RENAME_EXCHANGE)
    assert (b / "f").read_text() == "a" and not (a / "f").exists()


def test_stale_temporaries_of_dead_saves_are_removed_and_live_ones_kept(tmp_path, caplog):
    _save(tmp_path / "M", 1.0)
    host = swap._host()
    dead = tmp_path / f".M.tmp-{host}-{_dead_pid()}-0123abcd"
    live = tmp_path / f".M.tmp-{host}-{os.getppid()}-89abcdef"
    other = tmp_path / ".M.tmp-elsewhere-123-00000000"
    for p in (dead, live, other):
        p.mkdir()
        (p / "manifest.json").write_text("{}")
    _save(tmp_path / "M", 2.0)
    assert not dead.exists() and live.exists() and other.exists()
    assert "removed" in caplog.text and "elsewhere" in caplog.text


def test_fallback_killed_between_renames_is_recovered(tmp_path):
    """The fallback's window: M renamed away, the new folder not yet in place, the process dead."""
    _save(tmp_path / "M", 1.0)
    backup = tmp_path / f".M.old-{swap._host()}-{_dead_pid()}-0123abcd"
    os.rename(tmp_path / "M", backup)
    assert _value(tmp_path / "M") == 1.0  # loading puts the backup back
    assert _temporaries(tmp_path) == []


def test_temporary_folders_are_never_loaded_as_models(tmp_path):
    path = _save(tmp_path / "M", 1.0)
    tmp = tmp_path / f".M.tmp-{swap._host()}-{_dead_pid()}-0123abcd"
    os.rename(path, tmp)
    with pytest.raises(ModelFormatError, match="temporary folder"):
        ModelReader(tmp)
    with pytest.raises(ModelFormatError, match="reserved"):
        ModelWriter(tmp)


def test_output_that_is_not_a_model_is_refused_before_training(tmp_path, corpora):
    old = corpora[0]
    (tmp_path / "notes.txt").write_text("precious")
    out = _train([old, "-o", tmp_path / "notes.txt"], check=False)
    assert out.returncode == 2 and out.stderr.startswith(f"xmtc: error: {tmp_path / 'notes.txt'}: exists and is not")
    assert (tmp_path / "notes.txt").read_text() == "precious"
    out = _train([old, "-o", "-"], check=False)
    assert out.returncode == 2 and "cannot go to stdout" in out.stderr
    assert json.loads(json.dumps(_temporaries(tmp_path))) == []
