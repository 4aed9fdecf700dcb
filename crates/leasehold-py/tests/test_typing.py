"""The stubs and annotations, checked by mypy in strict mode: the installed
package (with its native module's stub) and a sample of code written
against it."""

from __future__ import annotations

import os

import pytest

SAMPLE = os.path.join(os.path.dirname(__file__), "typing_sample.py")
STRICT = ["--strict", "--no-incremental", "--cache-dir", os.devnull]


@pytest.mark.parametrize("target", [["-p", "leasehold"], [SAMPLE]], ids=["package", "sample"])
def test_mypy_strict(target: list[str]) -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extra: pip install .[test]")
    out, err, status = api.run([*STRICT, *target])
    assert status == 0, out + err
    assert "Success" in out
