"""Fixtures shared by several test modules: the bundled Seal-Tools data and its BM25 index,
loaded once per session."""
import pytest

from toolgym.data import load_dataset
from toolgym.retrieval import build_index


@pytest.fixture(scope="session")
def seal():
    return load_dataset("seal_tools")


@pytest.fixture(scope="session")
def bm25(seal):
    return build_index(seal.corpus, "bm25")
