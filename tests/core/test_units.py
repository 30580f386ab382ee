"""One byte-size convention: K = 10^3, Ki = 2^10 (hand-written expectations)."""

from __future__ import annotations

import pytest

from evtsync.core.errors import InputError
from evtsync.core.units import parse_bytes


@pytest.mark.parametrize("text, expected", [
    ("4096", 4096), ("1K", 1000), ("1k", 1000), ("1KB", 1000), ("1Ki", 1024), ("1KiB", 1024),
    ("256MiB", 268435456), ("256 MiB", 268435456), ("1M", 1_000_000), ("0.27GB", 270_000_000),
    ("1G", 1e9), ("1Gi", 2**30), ("2T", 2e12), ("1TiB", 2**40), ("1e9", 1e9), ("3B", 3),
])
def test_prefixes(text: str, expected: float) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "MiB", "-1K", "0", "1Q", "1 2", "1KK"])
def test_refused(text: str) -> None:
    with pytest.raises(InputError):
        parse_bytes(text)


def test_bandwidth_cli_reads_the_same_convention(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from evtsync.cli import main

    base = ["-q", "bandwidth", "--topology", "ring", "--n", "8", "--alpha-us", "5", "--tau-us", "0", "--json"]
    assert main([*base, "--bytes", "1M"]) == 0
    si = json.loads(capsys.readouterr().out)[0]
    assert main([*base, "--bytes", "1MiB"]) == 0
    iec = json.loads(capsys.readouterr().out)[0]
    assert iec["bstar_hockney_gbps"] / si["bstar_hockney_gbps"] == pytest.approx(2**20 / 1e6)
