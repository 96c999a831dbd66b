"""Example user tests for conftest_examples/conftest.py (copied into a
pytester folder by tests/test_examples.py)."""

import pytest


@pytest.mark.training
def test_one_training_step(headroom_gib):
    assert headroom_gib is not None and headroom_gib > 0


def test_tokenizer_roundtrip():
    assert "spark".upper() == "SPARK"
