"""Exact mid-epoch resume through ``as_torch``: the view's ``state_dict()`` /
``load_state_dict()`` are the dataset's, so torchdata's ``StatefulDataLoader`` checkpoints the
engine's position and a resumed loader yields exactly the rest of the epoch (the engine resumes;
the loader does not fast-forward through the batches it had yielded)."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import insitubatch_rs as ib

from conftest import source, store, url

EPOCH = 4
TAKEN = 3
BATCH = 5


def frameworks_required() -> bool:
    """Whether a missing torch/torchdata is a failure: under CI, in the venv that installs them
    (scripts/test-python.sh sets IB_FRAMEWORKS=1 there), as in test_distributed.py."""
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false")
    return ci and os.environ.get("IB_FRAMEWORKS") == "1"


def need(module: str) -> Any:
    """``module``, or a skip that says why (a failure where CI installs it)."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        why = f"{module} is not installed (tools/python/torch.in)"
        if frameworks_required():
            pytest.fail(f"{why}; CI installs it in this venv, so this is a failure, not a skip")
        pytest.skip(why)


def train_ds(fixtures: Path, manifest: dict) -> ib.InSituDataset:
    ds = ib.InSituDataset(url(fixtures, store(manifest, "v3_zstd")["path"]), batch_size=BATCH, block_chunks=2, seed=11)
    ds.set_epoch(EPOCH)
    return ds


@pytest.fixture
def sample_of(fixtures: Path, manifest: dict) -> Any:
    """A torch batch's sample indices, read back from its t2m rows (each row of the fixture's
    source values is distinct): what as_torch yields carries no indices of its own."""
    rows = source(fixtures, store(manifest, "v3_zstd")["arrays"]["t2m"], 0)
    index = {rows[i].tobytes(): i for i in range(len(rows))}
    assert len(index) == len(rows), "the fixture's rows are distinct"

    def samples(batch: dict[str, Any]) -> list[int]:
        t2m = batch["t2m"].numpy()
        return [index[np.ascontiguousarray(r).tobytes()] for r in t2m]

    return samples


def uninterrupted(fixtures: Path, manifest: dict) -> list[list[int]]:
    return [b.sample_indices.tolist() for b in train_ds(fixtures, manifest).train]


def test_stateful_dataloader_resumes_the_rest_of_the_epoch(fixtures, manifest, sample_of):
    need("torch")
    stateful = need("torchdata.stateful_dataloader")
    whole = uninterrupted(fixtures, manifest)
    assert len(whole) > TAKEN + 1

    ds = train_ds(fixtures, manifest)
    loader = stateful.StatefulDataLoader(ib.as_torch(ds.train), batch_size=None, num_workers=0)
    it = iter(loader)
    head = [sample_of(next(it)) for _ in range(TAKEN)]
    assert head == whole[:TAKEN]
    state = pickle.loads(pickle.dumps(loader.state_dict()))  # as torch.save would keep it
    engine_state = ds.state_dict()
    assert (engine_state["position"], engine_state["batches"]) == (TAKEN * BATCH, TAKEN)
    assert engine_state in list(_dicts(state)), f"the loader's state holds the engine's checkpoint: {state}"
    del it, loader
    ds.close()

    fresh = train_ds(fixtures, manifest)
    fresh.set_epoch(0)
    loader = stateful.StatefulDataLoader(ib.as_torch(fresh.train), batch_size=None, num_workers=0)
    loader.load_state_dict(state)
    rest = [sample_of(b) for b in loader]
    assert fresh.epoch == EPOCH
    assert rest == whole[TAKEN:], "the resumed loader yields exactly the rest of the epoch"
    assert fresh.last_pass is not None and fresh.last_pass.resumed_at == TAKEN * BATCH, "the engine resumed"
    assert fresh.last_pass.batches == len(whole) - TAKEN, "no batch was read to be skipped"


def test_the_views_own_state_dict_resumes_without_torchdata(fixtures, manifest, sample_of):
    need("torch")
    whole = uninterrupted(fixtures, manifest)
    ds = train_ds(fixtures, manifest)
    view = ib.as_torch(ds.train)
    it = iter(view)
    head = [sample_of(next(it)) for _ in range(TAKEN)]
    state = json.loads(json.dumps(view.state_dict()))
    assert state == ds.state_dict("train")
    assert (state["epoch"], state["position"], state["batches"]) == (EPOCH, TAKEN * BATCH, TAKEN)
    del it
    ds.close()

    fresh = train_ds(fixtures, manifest)
    fresh.set_epoch(0)
    view = ib.as_torch(fresh.train)
    view.load_state_dict(state)
    rest = [sample_of(b) for b in view]
    assert head + rest == whole, "the interrupted and resumed passes are one uninterrupted pass"
    assert view.state_dict()["position"] == sum(map(len, whole))
    # Refusals come from the dataset; a view over anything but a split view has no state.
    with pytest.raises(ValueError, match="seed 11"):
        other = ib.InSituDataset(fresh.store, batch_size=BATCH, block_chunks=2, seed=12)
        ib.as_torch(other.train).load_state_dict(state)
    with pytest.raises(TypeError, match="split view"):
        ib.as_torch([]).state_dict()


def _dicts(value: Any) -> Any:
    """Every dict nested in ``value`` (the loader's state is dicts and lists)."""
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _dicts(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _dicts(v)
