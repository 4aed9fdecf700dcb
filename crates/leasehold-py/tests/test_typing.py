"""The stubs and annotations, checked by mypy in strict mode: the package
(with its native module's stub) and a sample of code written against it."""

from __future__ import annotations

import os

import pytest

import leasehold

PACKAGE = os.path.dirname(os.path.abspath(str(leasehold.__file__)))
SAMPLE = os.path.join(os.path.dirname(__file__), "typing_sample.py")


def test_mypy_strict() -> None:
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extra: pip install .[test]")
    out, err, status = api.run(
        ["--strict", "--no-incremental", "--cache-dir", os.devnull, PACKAGE, SAMPLE]
    )
    assert status == 0, out + err
