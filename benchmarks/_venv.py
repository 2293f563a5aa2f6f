"""The peers' own virtual environment (benchmarks/.venv-peers), created and filled on demand.

PECOS 1.2.8 needs numpy<2 and scipy<1.14 while xmtc runs on numpy 2, so the peers cannot share
the project's interpreter. Each peer is installed by its own pip call: one that fails to install
leaves the others usable, and the table says "not installed" for it instead of crashing.

libpecos is installed with --no-deps: its declared dependencies (torch, transformers, peft,
datasets, ...) serve only XR-Transformer and add ~6 GB (CUDA wheels); XR-Linear imports only
numpy, scipy and scikit-learn, which are installed explicitly.

"pecos-xrt" (PECOS XR-Transformer, for transformer.py) adds what ``pecos.xmc.xtransformer`` imports
at run time: torch and transformers (which pulls tokenizers, safetensors, huggingface-hub). torch is
pinned to 2.13.0, the CPU build this machine keeps on disk (an unpinned torch resolves to a multi-GB
CUDA build); transformers to 4.49.0, the last release that still has ``transformers.AdamW`` and
``transformers.modeling_utils.SequenceSummary``, which PECOS 1.2.8 imports. peft, datasets and
sentencepiece are not needed by xtransformer and stay out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

BASE = ["numpy<2", "scipy<1.14"]
# peer -> list of pip invocations (argument lists after "pip install")
PEERS: dict[str, list[list[str]]] = {
    "pecos": [[*BASE, "scikit-learn"], ["--no-deps", "libpecos==1.2.8"]],
    "omikuji": [[*BASE, "omikuji==0.5.2"]],
    "napkinxc": [[*BASE, "napkinxc==0.7.2"]],
    "pecos-xrt": [[*BASE, "scikit-learn"], ["--no-deps", "libpecos==1.2.8"],
                  [*BASE, "torch==2.13.0", "transformers==4.49.0"]],
    # Annif goes into its own venv (benchmarks/.venv-annif, see annif_peer.py), never next to PECOS:
    # it pins its own numpy/scikit-learn. "annif-nn" adds nn_ensemble's keras/tensorflow.
    "annif": [["annif[omikuji,fasttext]==1.4.3"]],
    "annif-nn": [["annif[nn]==1.4.3"]],
}
MARKER = ".xmtc-bench-installed.json"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _base_interpreter() -> str:
    """python3.11 if on PATH (the peers publish wheels for it), else the running interpreter."""
    return shutil.which("python3.11") or sys.executable


def ensure_peers(venv: Path, peers: list[str], *, install: bool = True, log=print) -> dict[str, str]:
    """Create/reuse the venv and install the requested peers; return {peer: problem} for failures.

    A marker file records what was installed successfully, so a second run starts instantly.
    """
    problems: dict[str, str] = {}
    py = venv_python(venv)
    if not py.exists():
        if not install:
            return {p: f"no venv at {venv} (run without --no-install)" for p in peers}
        log(f"[venv] creating {venv} with {_base_interpreter()}")
        proc = subprocess.run([_base_interpreter(), "-m", "venv", str(venv)], capture_output=True, text=True)
        if proc.returncode != 0:
            msg = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
            return {p: f"venv creation failed: {msg[0]}" for p in peers}
    marker = venv / MARKER
    done = json.loads(marker.read_text()) if marker.exists() else {}
    for peer in peers:
        wanted = PEERS[peer]
        if done.get(peer) == wanted:
            continue
        if not install:
            problems[peer] = "not installed in the venv (run without --no-install)"
            continue
        for pip_args in wanted:
            log(f"[venv] pip install {' '.join(pip_args)}")
            proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                                   *pip_args], capture_output=True, text=True)
            if proc.returncode != 0:
                errs = [ln for ln in (proc.stderr + proc.stdout).splitlines()
                        if ln.strip() and "is ignored" not in ln]
                problems[peer] = f"pip install {' '.join(pip_args)} failed: {(errs or ['?'])[-1].strip()}"
                break
        else:
            done[peer] = wanted
            marker.write_text(json.dumps(done, indent=1))
    return problems
