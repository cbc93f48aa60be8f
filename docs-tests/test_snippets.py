"""Runs the code blocks of the book (docs/*.md) that are not Rust: pytest over extracted snippets.

- ```python: the blocks of a page run in order in one namespace, in a fresh interpreter (the
  test venv's, with insitubatch_rs installed by scripts/test-python.sh);
- ```js: the blocks of a page, in order, as one ES module under Node, where `insitubatch`
  resolves to the package in js/ (its wasm build, js/pkg/node, comes from scripts/test-wasm.sh);
  `http://localhost:8000/` is replaced by a loopback server over the demo store's folder;
- ```bash: the blocks of a page, in order, as one `bash -euo pipefail` script with the
  `insitubatch` CLI ($IB_DOCS_CLI) first on PATH;
- ```toml and ```json: parsed; ```text: not code; ```rust: doc-tests (examples/docs.rs);
- README.md's first ```python block (marked `<!-- readme-test: quickstart -->`), as written,
  on the demo store, printing a batch and a limiting stage the engine has.

Lines starting with `~` in python and js blocks are hidden in the book (book.toml) and run here
without the `~`. A block whose info string has `untested` is skipped, and the skip is printed with
its reason; every other language, and a block with none, fails (rustdoc would run an unlabelled
block as Rust). A missing prerequisite (the package, the CLI, the demo store) skips the page's
test saying why, and fails under CI (`CI` set), as everywhere in this repository.

    python -m pytest docs-tests/test_snippets.py        # scripts/test-docs.sh runs it
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUNNABLE = {"python", "js", "bash"}
ALIASES = {"javascript": "js", "sh": "bash", "shell": "bash", "py": "python"}
CHECKED = {"toml", "json"}
NOT_CODE = {"text", "rust"}  # rust: doc-tests
JS_BASE = "http://localhost:8000/"
# ```python tensorflow blocks: TensorFlow lives in a venv of its own (one framework per
# environment), where this test runs them; test_tensorflow_blocks_have_their_runner holds it to that.
TF_RUNNER = "python-bindings/tests/test_readme.py"
# A hang guard, not a timing assertion: a snippet that hangs fails instead of blocking CI.
HANG_GUARD_S = 900


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    lang: str
    attrs: str
    code: str


@dataclass
class Page:
    name: str
    blocks: list[Block] = field(default_factory=list)


FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})(.*)$")


def parse(path: Path) -> list[Block]:
    """The fenced code blocks of a markdown page (CommonMark fences, not indented blocks)."""
    rel = str(path.relative_to(DOCS))
    blocks, lines, i = [], path.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not re.match(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        lang, _, attrs = info.partition(" ")
        lang = lang.split(",")[0].lower()
        blocks.append(Block(rel, start, ALIASES.get(lang, lang), attrs.strip(), "\n".join(body) + "\n"))
    return blocks


def pages() -> list[Page]:
    out = []
    for path in sorted(DOCS.rglob("*.md")):
        out.append(Page(str(path.relative_to(DOCS)), parse(path)))
    return out


PAGES = pages()


def under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def missing(why: str) -> None:
    if under_ci():
        pytest.fail(f"{why}; CI is set, where this is a failure, not a skip")
    pytest.skip(why)


def runnable(page: Page, lang: str) -> list[Block]:
    """The page's blocks of `lang` that run, printing each `untested` skip and its reason."""
    out = []
    for b in page.blocks:
        if b.lang != lang:
            continue
        if b.attrs.startswith("untested"):
            print(f"skipping {b.page}:{b.line} ({lang} {b.attrs})", file=sys.stderr)
            continue
        if b.attrs == "tensorflow":
            print(f"passing {b.page}:{b.line} by: it runs in the TensorFlow venv ({TF_RUNNER})", file=sys.stderr)
            continue
        out.append(b)
    return out


def unhide(code: str) -> str:
    return "\n".join(line[1:] if line.startswith("~") else line for line in code.splitlines()) + "\n"


def demo_store() -> Path:
    cache = os.environ.get("INSITUBATCH_CACHE", os.path.expanduser("~/.cache/insitubatch"))
    store = Path(cache) / "demo" / "era5_demo.zarr"
    if not (store / ".complete").exists():
        missing(f"no demo store at {store}: run `insitubatch demo` (scripts/test-docs.sh does)")
    return store


def run(cmd: list[str], cwd: Path, what: str, env: dict[str, str] | None = None) -> None:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    assert p.returncode == 0, f"{what} failed (exit {p.returncode}):\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"


# -- the checks ----------------------------------------------------------------------------------


def test_every_block_has_a_known_language() -> None:
    known = RUNNABLE | CHECKED | NOT_CODE
    bad = [f"{b.page}:{b.line}: ```{b.lang or '(none)'}" for p in PAGES for b in p.blocks if b.lang not in known]
    assert not bad, "blocks with no language or one no runner knows (label them; see docs/testing-docs.md):\n" + "\n".join(bad)
    no_run = [b for p in PAGES for b in p.blocks if b.attrs.startswith("untested")]
    for b in no_run:
        assert re.match(r"^untested \(.+\)$", b.attrs), f"{b.page}:{b.line}: say why a block cannot run: untested (reason)"
    assert len(no_run) <= 5, f"{len(no_run)} untested blocks: keep them rare, every block should run in CI"


def test_tensorflow_blocks_have_their_runner() -> None:
    tf_blocks = [f"{b.page}" for p in PAGES for b in p.blocks if b.lang == "python" and b.attrs == "tensorflow"]
    runner = (ROOT / TF_RUNNER).read_text()
    assert tf_blocks, "no ```python tensorflow block: the TensorFlow example of docs/frameworks.md is gone"
    for page in tf_blocks:
        assert f'"{page}"' in runner, f"{TF_RUNNER} does not run the tensorflow block of docs/{page}"


# An absolute path of one machine: a home folder or a temp folder. Pages write
# `$INSITUBATCH_CACHE/...`, `~/...`, `$TMPDIR/...` or a path relative to the repository
# (bench/report.py `command_line` prints commands so).
MACHINE_PATH = re.compile(r"(?<![\w$~.])/(?:root|home/[^/\s`]+|tmp|var/tmp)/")


def test_no_page_prints_a_machine_path() -> None:
    bad = []
    for md in sorted(DOCS.rglob("*.md")):
        for n, line in enumerate(md.read_text().splitlines(), 1):
            if m := MACHINE_PATH.search(line):
                bad.append(f"{md.relative_to(ROOT)}:{n}: {line[max(0, m.start() - 30):m.end() + 40]}")
    assert not bad, "absolute paths of one machine (write $INSITUBATCH_CACHE/..., ~/... or $TMPDIR/...):\n" + "\n".join(bad)


def test_one_version_everywhere() -> None:
    """The crates, the Python package and the npm package carry one version: the newest of
    CHANGELOG.md."""
    newest = re.search(r"^## (\d+\.\d+\.\d+\S*)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert newest, "CHANGELOG.md has no version heading (## X.Y.Z)"
    versions = {
        "Cargo.toml [workspace.package]": tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"],
        "python-bindings/pyproject.toml": tomllib.loads((ROOT / "python-bindings/pyproject.toml").read_text())["project"]["version"],
        "js/package.json": json.loads((ROOT / "js/package.json").read_text())["version"],
    }
    differ = {k: v for k, v in versions.items() if v != newest.group(1)}
    assert not differ, f"versions other than CHANGELOG.md's newest ({newest.group(1)}): {differ}"


@pytest.mark.parametrize("page", [p for p in PAGES if any(b.lang in CHECKED for b in p.blocks)], ids=lambda p: p.name)
def test_config_blocks_parse(page: Page) -> None:
    for b in page.blocks:
        try:
            if b.lang == "toml":
                tomllib.loads(b.code)
            elif b.lang == "json":
                json.loads(b.code)
        except ValueError as e:
            pytest.fail(f"{b.page}:{b.line}: {b.lang} does not parse: {e}")


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p, "python")], ids=lambda p: p.name)
def test_python_blocks(page: Page, tmp_path: Path) -> None:
    try:
        import insitubatch_rs  # noqa: F401
    except ImportError:
        missing(f"insitubatch_rs is not installed in {sys.executable}: run scripts/test-python.sh")
    demo_store()
    blocks = [(b.line, unhide(b.code)) for b in runnable(page, "python")]
    # One interpreter per page; each block compiled under its page and line, so a traceback
    # points at the book.
    script = tmp_path / "page.py"
    script.write_text(
        "import json, sys\nns = {'__name__': '__main__'}\n"
        f"for line, code in json.loads({json.dumps(json.dumps(blocks))}):\n"
        f"    print(f'--- {page.name}:{{line}}', flush=True)\n"
        f"    exec(compile('\\n' * line + code, '{DOCS / page.name}', 'exec'), ns)\n"
    )
    run([sys.executable, str(script)], tmp_path, f"python blocks of {page.name}")


README = ROOT / "README.md"


def test_the_readmes_first_python_block_runs_as_written_on_the_demo_store(tmp_path: Path) -> None:
    """README.md's first Python block (marked `<!-- readme-test: quickstart -->`), run as
    written, with nothing bound for it, reads the demo store `scripts/demo.sh` writes and
    prints a batch and a limiting stage the engine has."""
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    marked = re.findall(r"<!-- readme-test: quickstart -->\n```python\n(.*?)^```", text, re.S | re.M)
    assert len(marked) == 1, "README.md has no block marked <!-- readme-test: quickstart --> (or several)"
    assert blocks and blocks[0] == marked[0], "the block marked readme-test: quickstart is not README.md's first Python block"
    try:
        import torch  # noqa: F401
        from insitubatch_rs import _reports
    except ImportError as e:
        missing(f"the README's block needs insitubatch_rs and torch in {sys.executable} ({e}): run scripts/test-python.sh")
    demo_store()
    script = tmp_path / "readme.py"
    script.write_text(marked[0], encoding="utf-8")
    p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=HANG_GUARD_S)
    sys.stdout.write(p.stdout)
    assert p.returncode == 0, f"README.md's first Python block failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    lines = p.stdout.strip().splitlines()
    assert any(re.match(r"epoch 1: last batch \(\d+, 91, 180\), mean -?\d", ln) for ln in lines), lines[-4:]
    stages = set(typing.get_args(_reports.LimitingStage))
    assert lines[-1] in stages, f"the block's last line {lines[-1]!r} is no limiting stage of the engine's {sorted(stages)}"
    said = re.search(r"last_pass\.limiting_stage\)\s*#\s*(.*)$", marked[0], re.M)
    named = set(re.findall(r'"(\w+)"', said.group(1))) if said else set()
    assert named and named <= stages, f"the block's comment names stages the engine lacks: {sorted(named - stages)}"


@pytest.fixture(scope="session")
def store_server():
    """The loopback HTTP server of the tests (tests/servers/http_server.py) over the demo
    store's folder; yields its base URL."""
    folder = demo_store().parent
    p = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/servers/http_server.py"), "--root", str(folder), "--port", "0",
         "--port-file", "-"],
        stdout=subprocess.PIPE, text=True,
    )
    port = p.stdout.readline().strip()  # the server's first line: it is listening
    assert port, "the loopback HTTP server did not start"
    yield f"http://127.0.0.1:{port}/"
    p.terminate()
    p.wait()


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p, "js")], ids=lambda p: p.name)
def test_js_blocks(page: Page, tmp_path: Path, store_server: str) -> None:
    if not (ROOT / "js/pkg/node/insitubatch_wasm.js").exists():
        missing("js/pkg/node is not built: run scripts/test-wasm.sh (or scripts/test-wasm.sh --build-only)")
    if not shutil.which("node"):
        missing("node is not on PATH")
    src = "".join(f"// --- {page.name}:{b.line}\n{unhide(b.code)}" for b in runnable(page, "js"))
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "insitubatch").symlink_to(ROOT / "js")
    (tmp_path / "page.mjs").write_text(src.replace(JS_BASE, store_server))
    run(["node", "page.mjs"], tmp_path, f"js blocks of {page.name}")


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p, "bash")], ids=lambda p: p.name)
def test_bash_blocks(page: Page, tmp_path: Path) -> None:
    cli = os.environ.get("IB_DOCS_CLI", "")
    if not (cli and os.access(cli, os.X_OK)):
        missing("IB_DOCS_CLI is not the insitubatch binary: run scripts/test-docs.sh")
    demo_store()
    src = "".join(f"# --- {page.name}:{b.line}\n{b.code}" for b in runnable(page, "bash"))
    (tmp_path / "page.sh").write_text(src)
    env = dict(os.environ, PATH=f"{Path(cli).parent}{os.pathsep}{os.environ['PATH']}")
    run(["bash", "-euo", "pipefail", str(tmp_path / "page.sh")], ROOT, f"bash blocks of {page.name}", env)
