"""Lightning: python-bindings/examples/lightning_resume.py run three times over a fixture store:
uninterrupted, killed by SIGKILL after a mid-epoch checkpoint, and resumed from that checkpoint.
The killed run's steps and the resumed run's steps are the uninterrupted run's, batch for batch,
and the resumed model ends with the same weights (Lightning restores the model and optimizer;
the checkpoint's loader state is the engine's, so the data continue exactly)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import store, url
from test_resume_torch import need

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "lightning_resume.py"
KILL_AFTER = 7  # mid-epoch 0: the fixture's train split makes more than 7 batches of 5


def run(args: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args, str(out)], capture_output=True, text=True, timeout=600
    )  # fmt: skip


def steps(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


def test_a_killed_lightning_run_resumes_exactly(fixtures, manifest, tmp_path):
    torch = need("torch")
    need("lightning")
    need("torchdata.stateful_dataloader")
    src = url(fixtures, store(manifest, "v3_zstd")["path"])

    whole = run([src], tmp_path / "whole")
    assert whole.returncode == 0, f"the uninterrupted run failed:\n{whole.stdout[-2000:]}\n{whole.stderr[-6000:]}"
    expected = steps(tmp_path / "whole")
    epoch0 = [s for s in expected if s["epoch"] == 0]
    assert len(epoch0) > KILL_AFTER + 1 and {s["epoch"] for s in expected} == {0, 1}

    killed = run([src, "--kill-after-step", str(KILL_AFTER)], tmp_path / "killed")
    assert killed.returncode == -signal.SIGKILL, f"the run was to kill itself:\n{killed.stderr[-6000:]}"
    head = steps(tmp_path / "killed")
    assert head == expected[:KILL_AFTER]
    (ckpt,) = (tmp_path / "killed" / "ckpt").glob("*.ckpt")
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    (loader_state,) = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert _holds_position(loader_state, KILL_AFTER * 5), f"the checkpoint holds the engine's position: {loader_state}"

    resumed = run([src, "--resume", str(ckpt)], tmp_path / "resumed")
    assert resumed.returncode == 0, f"the resumed run failed:\n{resumed.stdout[-2000:]}\n{resumed.stderr[-6000:]}"
    rest = steps(tmp_path / "resumed")
    assert [s["rows"] for s in head + rest] == [s["rows"] for s in expected], "killed + resumed = one uninterrupted run"
    assert head + rest == expected, "with the same epochs and step numbers"
    final = json.loads((tmp_path / "resumed" / "final.json").read_text())
    assert final == json.loads((tmp_path / "whole" / "final.json").read_text()), "the same weights at the end"


def _holds_position(value: object, position: int) -> bool:
    """Whether the engine's checkpoint (a dict with ``position``) is somewhere in ``value``."""
    if isinstance(value, dict):
        return value.get("position") == position or any(_holds_position(v, position) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_position(v, position) for v in value)
    return False
