"""Every benchmark loader returns the shared `Loaded[T]` (items, source, sha256)."""

from __future__ import annotations

from personalign.benchmarks.benchpres.data import load_benchpres
from personalign.benchmarks.cupid.data import load_cupid
from personalign.data.loaded import Loaded


def test_cupid_and_benchpres_loaders_return_loaded_items_under_their_own_names() -> None:
    cupid, benchpres = load_cupid("fixture"), load_benchpres("fixture")
    assert isinstance(cupid, Loaded) and isinstance(benchpres, Loaded)
    assert cupid.items and cupid.instances is cupid.items
    assert benchpres.items and benchpres.rows is benchpres.items
    assert cupid.source and benchpres.source


def test_loaded_record_counts_its_items_under_the_given_key() -> None:
    loaded = Loaded(items=["a", "b"], source="file.jsonl", sha256="abc")
    assert loaded.record("n_rows") == {"source": "file.jsonl", "sha256": "abc", "n_rows": 2}
