"""Paths the tests need.  MOEFT_LIB names libmoeft.so (default: the
repository's build-py tree), MOEFT_CLI the moeft tool (default: beside it,
BUILD/tools/moeft)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parent.parent
TESTS_DIR = PYTHON_DIR / "tests"
sys.path[:0] = [str(PYTHON_DIR), str(TESTS_DIR)]

LIB = Path(os.environ.get("MOEFT_LIB", PYTHON_DIR.parent / "build-py/preload/libmoeft.so"))
CLI = Path(os.environ.get("MOEFT_CLI", LIB.parent.parent / "tools/moeft"))


@pytest.fixture(scope="session")
def moeft_lib() -> Path:
    if not LIB.is_file() or not CLI.is_file():
        pytest.fail(f"build libmoeft.so and moeft first ({LIB}, {CLI}): "
                    "meson setup build-py && ninja -C build-py, or set MOEFT_LIB")
    return LIB


@pytest.fixture(scope="session")
def moeft_cli(moeft_lib: Path) -> Path:
    return CLI
