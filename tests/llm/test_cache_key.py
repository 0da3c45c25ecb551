"""The cache key's canonical config JSON: non-ASCII kept as is, computed once per config object."""

from __future__ import annotations

import json

from personalign.llm import cache
from personalign.llm.cache import config_json
from personalign.llm.types import GenerateConfig


def test_config_json_is_canonical_and_keeps_non_ascii() -> None:
    config = GenerateConfig(temperature=0.0, json_schema={"enum": ["café"]}, schema_name="s")
    text = config_json(config)
    assert "café" in text and "\\u00e9" not in text
    assert text == json.dumps(
        config.cache_fields(), sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )


def test_config_json_is_computed_once_per_config_object() -> None:
    config = GenerateConfig(temperature=0.3)
    assert config_json(config) is config_json(config)


def test_config_json_never_returns_another_objects_text_for_a_reused_id() -> None:
    config, other = GenerateConfig(temperature=0.1), GenerateConfig(temperature=0.9)
    cache._CONFIG_JSON[id(config)] = (other, "stale")  # as if `other` had died and its id were reused
    assert config_json(config) != "stale"
    assert json.loads(config_json(config))["temperature"] == 0.1
