"""The upstream-file machinery, on stand-in files written for these tests (never the official text)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from personalign.errors import ConfigError, PersonalignError
from personalign.protocols import (
    ProtocolError,
    UpstreamSource,
    cache_dir,
    fetch_source,
    open_upstream,
    protocol_label,
    resolve_protocol,
    verify_all,
)

COMMIT = "0123456789abcdef0123456789abcdef01234567"

STAND_INS = {
    "prompts/greet.yaml": (
        "system_prompt: |-\n  Be brief about {topic}.\nuser_prompt: |-\n  Tell me about {topic}.\n"
    ),
    "notes/readme.txt": "A plain note for the reader.\n",
    "pkg/constants.py": (
        "import json\n\nSHOTS = [\n    {'question': 'Is it blue?', 'score': 1},\n"
        "    {'question': 'Is it red?', 'score': 0.5},\n]\n"
        "LIMIT: int = 3\nCOMPUTED = json.dumps(SHOTS)\n\ndef helper():\n    raise SystemExit('never run')\n"
    ),
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_source(**overrides: str) -> UpstreamSource:
    files = {path: sha(text) for path, text in STAND_INS.items()}
    files.update(overrides)
    return UpstreamSource(name="demo", repo="example/demo", commit=COMMIT, license="MIT", files=files)


def write_checkout(root: Path, contents: dict[str, str] | None = None) -> Path:
    for path, text in (contents or STAND_INS).items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    return root


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERSONALIGN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PERSONALIGN_PROTOCOL_DIR_DEMO", raising=False)
    monkeypatch.delenv("PERSONALIGN_PROTOCOL_DIR_CUPID", raising=False)


def test_resolve_protocol_defaults_to_paper_only_on_official_data() -> None:
    assert resolve_protocol(None, official_data=True) == "paper"
    assert resolve_protocol(None, official_data=False) == "personalign"
    assert resolve_protocol("paper", official_data=False) == "paper"
    assert resolve_protocol("personalign", official_data=True) == "personalign"
    with pytest.raises(ConfigError, match="unknown protocol 'papers'"):
        resolve_protocol("papers", official_data=True)


def test_protocol_label_marks_the_protocol() -> None:
    assert protocol_label("gpt-4o", "paper") == "gpt-4o [paper]"


def test_source_rejects_short_commits_and_bad_hashes() -> None:
    with pytest.raises(ValueError, match="40 lowercase hex"):
        UpstreamSource(name="x", repo="a/b", commit="958a4b3", license="MIT", files={})
    with pytest.raises(ValueError, match="sha256 of p"):
        UpstreamSource(name="x", repo="a/b", commit=COMMIT, license="MIT", files={"p": "abc"})


def test_reads_text_yaml_and_constants_from_a_checkout(tmp_path: Path) -> None:
    files = open_upstream(make_source(), write_checkout(tmp_path / "checkout"))
    assert files.text("notes/readme.txt") == STAND_INS["notes/readme.txt"]
    prompt = files.yaml_mapping("prompts/greet.yaml", "system_prompt", "user_prompt")
    assert prompt["user_prompt"] == "Tell me about {topic}."
    assert files.constant("pkg/constants.py", "SHOTS")[1] == {"question": "Is it red?", "score": 0.5}
    assert files.constant("pkg/constants.py", "LIMIT") == 3
    manifest = files.manifest()
    assert manifest["repo"] == "example/demo" and manifest["commit"] == COMMIT
    assert manifest["origin"] == "--protocol-dir"
    assert manifest["files"] == {path: sha(text) for path, text in STAND_INS.items()}


def test_a_constant_that_is_missing_or_computed_is_a_clear_error(tmp_path: Path) -> None:
    files = open_upstream(make_source(), write_checkout(tmp_path / "checkout"))
    with pytest.raises(ProtocolError, match=r"pkg/constants.py: no top-level constant EXAMPLES"):
        files.constant("pkg/constants.py", "EXAMPLES")
    with pytest.raises(ProtocolError, match=r"constant COMPUTED is not a literal"):
        files.constant("pkg/constants.py", "COMPUTED")


def test_a_wrong_checksum_names_the_file_and_the_fix(tmp_path: Path) -> None:
    root = write_checkout(tmp_path / "checkout")
    (root / "notes/readme.txt").write_text("An edited note.\n", encoding="utf-8")
    files = open_upstream(make_source(), root)
    with pytest.raises(ProtocolError) as caught:
        files.text("notes/readme.txt")
    message = str(caught.value)
    assert "notes/readme.txt" in message and sha("An edited note.\n") in message
    assert "personalign protocol fetch demo" in message and "--protocol-dir" in message
    assert files.used == {}


def test_a_pinned_hash_table_can_be_overridden(tmp_path: Path) -> None:
    root = write_checkout(tmp_path / "checkout", {"notes/readme.txt": "Another note.\n"})
    source = make_source(**{"notes/readme.txt": sha("Another note.\n")})
    assert open_upstream(source, root).text("notes/readme.txt") == "Another note.\n"


def test_a_missing_file_or_unpinned_path_is_a_protocol_error(tmp_path: Path) -> None:
    root = write_checkout(tmp_path / "checkout", {"notes/readme.txt": STAND_INS["notes/readme.txt"]})
    files = open_upstream(make_source(), root)
    with pytest.raises(
        ProtocolError, match=r"prompts/greet.yaml is missing .*personalign protocol fetch demo"
    ):
        files.yaml("prompts/greet.yaml")
    with pytest.raises(ProtocolError, match="not pinned"):
        files.text("other/file.txt")
    with pytest.raises(ProtocolError, match=r"greet\.yaml is missing"):
        verify_all(files)
    assert isinstance(ProtocolError("x"), PersonalignError)


def test_without_a_dir_the_env_var_then_the_cache_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = make_source()
    with pytest.raises(ProtocolError, match=r"\(cache\) is not a directory.*protocol fetch demo"):
        open_upstream(source)
    write_checkout(cache_dir(source))
    assert cache_dir(source) == tmp_path / "cache" / "protocols" / "demo" / COMMIT
    assert open_upstream(source).origin == "cache"
    checkout = write_checkout(tmp_path / "env-checkout")
    monkeypatch.setenv("PERSONALIGN_PROTOCOL_DIR_DEMO", str(checkout))
    files = open_upstream(source)
    assert (files.root, files.origin) == (checkout, "$PERSONALIGN_PROTOCOL_DIR_DEMO")


def _transport(contents: dict[str, str], seen: list[str]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        prefix = f"/example/demo/{COMMIT}/"
        path = request.url.path.removeprefix(prefix)
        if request.url.host != "raw.githubusercontent.com" or path not in contents:
            return httpx.Response(404)
        return httpx.Response(200, content=contents[path].encode("utf-8"))

    return httpx.MockTransport(handler)


def test_fetch_downloads_verifies_and_caches_each_pinned_file() -> None:
    source = make_source()
    seen: list[str] = []
    with httpx.Client(transport=_transport(STAND_INS, seen)) as client:
        target, downloaded = fetch_source(source, client=client)
        assert sorted(downloaded) == sorted(STAND_INS)
        assert f"https://raw.githubusercontent.com/example/demo/{COMMIT}/prompts/greet.yaml" in seen
        assert verify_all(open_upstream(source)) == dict(source.files)
        assert not list(target.rglob("*.part"))
        seen.clear()
        assert fetch_source(source, client=client)[1] == []
        assert seen == []


def test_fetch_refuses_a_file_whose_hash_differs_and_caches_nothing_of_it() -> None:
    served = dict(STAND_INS, **{"notes/readme.txt": "Tampered.\n"})
    with (
        httpx.Client(transport=_transport(served, [])) as client,
        pytest.raises(ProtocolError, match=r"notes/readme.txt has sha256 .* not cached"),
    ):
        fetch_source(make_source(), client=client)
    assert not (cache_dir(make_source()) / "notes/readme.txt").exists()


def test_fetch_reports_http_errors() -> None:
    served = {k: v for k, v in STAND_INS.items() if k != "pkg/constants.py"}
    with (
        httpx.Client(transport=_transport(served, [])) as client,
        pytest.raises(ProtocolError, match=r"constants.py answered HTTP 404"),
    ):
        fetch_source(make_source(), client=client)


def test_cli_verify_and_fetch_errors_exit_2(tmp_path: Path) -> None:
    from personalign.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["protocol", "fetch", "nosuch"])
    assert result.exit_code == 2 and "no paper protocol for 'nosuch'" in result.output
    stand_in = write_checkout(tmp_path / "fake-cupid", {"prompts/evaluation/response_judger.yaml": "x: 1\n"})
    result = runner.invoke(app, ["protocol", "verify", "cupid", "--protocol-dir", str(stand_in)])
    assert result.exit_code == 2
    assert "personalign protocol fetch cupid" in result.output
