"""The pass-report stream as a training loop's exporters see it: a Prometheus endpoint
scraped over loopback HTTP (its figures equal ``last_pass``) and Python callbacks."""

from __future__ import annotations

import sys
import urllib.request

import pytest
from conftest import url

import insitubatch_rs as ib


def _scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics") as r:  # noqa: S310 - loopback
        return r.read().decode()


def _value(text: str, name: str, *labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(x in line for x in labels):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} {labels} in\n{text}")


def test_prometheus_figures_match_the_pass_reports(fixtures):
    seen = []
    ds = ib.InSituDataset(url(fixtures, "v3_zstd"), batch_size=8, metrics_address="127.0.0.1:0", callbacks=[seen.append])
    assert ds.metrics_address is not None and ds.metrics_address.startswith("127.0.0.1:")
    for epoch in range(2):
        ds.set_epoch(epoch)
        for _ in ds.train:
            pass
    for _ in ds.val:
        pass
    text = _scrape(ds.metrics_address)
    train = ('split="train"', 'rank="0"', 'world_size="1"')
    trains = [s for s in seen if s.split == "train"]
    assert len(trains) == 2 and [s.split for s in seen] == ["train", "train", "val"]
    assert seen[-1] == ds.last_pass, "the callback gets the pass's own report"
    assert _value(text, "insitubatch_passes_total", *train) == 2
    assert _value(text, "insitubatch_samples_total", *train) == sum(s.samples for s in trains)
    assert _value(text, "insitubatch_bytes_fetched_total", *train) == sum(s.bytes_fetched for s in trains)
    assert _value(text, "insitubatch_samples_total", 'split="val"') == seen[-1].samples
    assert _value(text, "insitubatch_batch_wait_seconds", *train, 'key="0.5"') == pytest.approx(trains[-1].batch_wait_p50_s)
    assert _value(text, "insitubatch_limiting_stage", *train, f'key="{trains[-1].limiting_stage}"') == 1


def test_a_failing_callback_goes_to_the_unraisable_hook(fixtures, monkeypatch):
    caught = []
    monkeypatch.setattr(sys, "unraisablehook", caught.append)

    def broken(stats):
        raise RuntimeError("callback bug")

    ds = ib.InSituDataset(url(fixtures, "v3_zstd"), batch_size=8, callbacks=[broken])
    assert sum(len(b) for b in ds.train) == ds.last_pass.samples, "the pass itself is unharmed"
    assert [type(c.exc_value) for c in caught] == [RuntimeError]
    with pytest.raises(TypeError, match="callable"):
        ib.InSituDataset(url(fixtures, "v3_zstd"), callbacks=[42])
    with pytest.raises(ValueError, match="IP:PORT"):
        ib.InSituDataset(url(fixtures, "v3_zstd"), metrics_address="256.0.0.1:1")


def test_no_page_may_read_the_metrics_unless_the_job_names_its_origin(fixtures):
    def allowed(ds: ib.InSituDataset, origin: str) -> str | None:
        request = urllib.request.Request(f"http://{ds.metrics_address}/metrics", headers={"Origin": origin})
        with urllib.request.urlopen(request) as r:  # noqa: S310 - loopback
            return r.headers.get("Access-Control-Allow-Origin")

    closed = ib.InSituDataset(url(fixtures, "v3_zstd"), batch_size=8, metrics_address="0")
    assert closed.metrics_address is not None and closed.metrics_address.startswith("127.0.0.1:"), "a port alone is loopback"
    assert allowed(closed, "http://localhost:5173") is None
    ds = ib.InSituDataset(
        url(fixtures, "v3_zstd"), batch_size=8, metrics_address="127.0.0.1:0", metrics_cors_origin="http://localhost:5173"
    )
    assert allowed(ds, "http://localhost:5173") == "http://localhost:5173"
    assert allowed(ds, "http://evil.example") is None
    with pytest.raises(ValueError, match="one web origin"):
        ib.InSituDataset(url(fixtures, "v3_zstd"), metrics_address="127.0.0.1:0", metrics_cors_origin="*")
