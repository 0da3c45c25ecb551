"""Bad values given to the memory engine: refused with an error naming the field, nothing stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from personalign.errors import DataError
from personalign.memory import MemoryEngine

LONE_SURROGATE = "caf\udce9"  # what a mis-decoded byte leaves behind (surrogateescape)


@pytest.fixture()
def engine(tmp_path: Path) -> Any:
    engine = MemoryEngine(tmp_path / "m.sqlite", embedder="hash")
    engine.add_user("u1")
    yield engine
    engine.close()


def _refused(error: pytest.ExceptionInfo[DataError], field: str, *words: str) -> None:
    assert error.value.field == field
    for word in words:
        assert word in str(error.value)


def test_lone_surrogate_in_a_message(engine: Any) -> None:
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": LONE_SURROGATE}]
    with pytest.raises(DataError) as error:
        engine.add_session("u1", messages)
    _refused(error, "content", "lone surrogate")
    assert error.value.row == 1
    assert engine.sessions("u1") == []


def test_lone_surrogate_in_a_memory_a_user_id_and_a_request(engine: Any) -> None:
    with pytest.raises(DataError) as error:
        engine.add_memory("u1", f"I like {LONE_SURROGATE}")
    _refused(error, "content", "lone surrogate")
    with pytest.raises(DataError) as error:
        engine.add_memory("u1", "I like tea", context_factor=LONE_SURROGATE)
    _refused(error, "context_factor")
    with pytest.raises(DataError) as error:
        engine.add_user(LONE_SURROGATE)
    _refused(error, "user_id")
    with pytest.raises(DataError) as error:
        engine.retrieve("u1", LONE_SURROGATE)
    _refused(error, "request")
    assert engine.memories("u1") == []


@pytest.mark.parametrize("timestamp", ["yesterday", float("nan"), float("inf"), True, [1]])
def test_timestamp_must_be_a_finite_number(engine: Any, timestamp: object) -> None:
    with pytest.raises(DataError) as error:
        engine.add_session("u1", [{"role": "user", "content": "hi"}], timestamp=timestamp)
    _refused(error, "timestamp")
    assert engine.sessions("u1") == []


def test_memory_valid_from_must_be_a_finite_number(engine: Any) -> None:
    with pytest.raises(DataError) as error:
        engine.add_memory("u1", "I like tea", valid_from=float("nan"))
    _refused(error, "valid_from")
    with pytest.raises(DataError) as error:
        engine.store.add_memory("u1", "I like tea", valid_from="yesterday")
    _refused(error, "valid_from")


def test_nan_in_metadata_is_refused(engine: Any) -> None:
    with pytest.raises(DataError) as error:
        engine.add_session("u1", [{"role": "user", "content": "hi"}], metadata={"score": float("nan")})
    _refused(error, "metadata")


def test_good_values_still_work(engine: Any) -> None:
    engine.add_session("u1", [{"role": "user", "content": "I love café au lait"}], timestamp=1_700_000_000)
    engine.add_session("u1", [{"role": "user", "content": "tea later"}], timestamp=np.int64(1_700_000_100))
    engine.add_memory("u1", "Prefers café au lait", valid_from=1_700_000_000.5)
    assert [s.timestamp for s in engine.sessions("u1")] == [1_700_000_000.0, 1_700_000_100.0]
    found = engine.retrieve("u1", "café")
    assert found.sessions and found.memories
