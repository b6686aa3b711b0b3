"""Smoke test of `python -m bench`: a tiny subset runs and writes the JSON shape.

No timing is asserted. The peers are not needed (only krabka runs here); the
suite's broker is reused through ``--bootstrap-servers``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"figure", "system", "unit", "n", "min", "p50", "p90", "p99", "max", "configuration"}


def test_codec_and_authority_check_for_krabka_write_the_json_shape(kafka_bootstrap, tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "codec", "authority-check", "--systems", "krabka",
         "--trials", "3", "--quick", "--bootstrap-servers", kafka_bootstrap,
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    print(done.stdout[-3000:])
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    figures = {(r["figure"], r["system"], r.get("metric")) for r in results}
    assert ("codec", "krabka", "encode") in figures
    assert ("codec", "krabka", "decode") in figures
    assert ("authority-check", "krabka", None) in figures
    for result in results:
        assert set(result) >= KEYS, result
        assert result["n"] == len(result["samples"]) > 0
        assert result["min"] <= result["p50"] <= result["p90"] <= result["p99"] <= result["max"]
        assert result["configuration"]["lease_s"] == 3.0
    assert "ours/peer p50" in done.stdout
    meta = json.loads(out.with_suffix(".meta.json").read_text())
    assert meta["machine"]["nproc"]
