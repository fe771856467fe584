"""Every golden case of nanoBragg.c through `from_args`: the float image of
`simulate(..., dtype="exact")` has the SHA-256 of the C program's."""

import hashlib
import pathlib

import pytest

import nanobragg

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = pytest.importorskip("tomli")

GOLDEN = pathlib.Path(__file__).resolve().parents[3] / "tests" / "golden"
CASES = tomllib.loads((GOLDEN / "cases.toml").read_text())["case"]
FLOAT_CASES = [c for c in CASES if "float.bin" in c["outputs"]]


def test_most_cases_have_a_float_image():
    assert len(FLOAT_CASES) >= 45, len(FLOAT_CASES)


@pytest.mark.parametrize("case", FLOAT_CASES, ids=[c["id"] for c in FLOAT_CASES])
def test_golden_case(case, tmp_path, monkeypatch):
    # as the reference ran: inputs/ beside the working directory
    (tmp_path / "inputs").symlink_to(GOLDEN / "inputs")
    monkeypatch.chdir(tmp_path)
    model = nanobragg.from_args(case["args"])
    image = nanobragg.simulate(model, dtype="exact", threads=2)
    assert image.shape == (case["spixels"], case["fpixels"])
    digest = hashlib.sha256(image.astype("<f4").tobytes()).hexdigest()
    assert digest == case["sha256"]["float.bin"], case["note"]
