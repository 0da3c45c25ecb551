"""`personalign synth cupid` end to end with scripted models (no injection: the spec is enough)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from personalign.benchmarks.cupid.data import load_cupid
from personalign.cli import app
from personalign.synth_options import SynthRun, synth_command

runner = CliRunner()


def test_synth_cupid_command_writes_loadable_data_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = [
        "synth", "cupid", "--out", str(out), "--generator", "scripted/gen",
        "--user-simulator", "scripted/user", "--assistant", "scripted/assistant",
        "--leak-judge", "scripted/judge", "--personas", "2", "--factors", "4", "--sessions", "10",
        "--max-turns", "3", "--cache", str(tmp_path / "c.sqlite"), "--no-progress",
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2/2 personas generated, 2 passed validation, 0 failed, 0 rejected" in result.output
    dataset = load_cupid(out / "cupid.jsonl")
    assert len(dataset.instances) == 6
    assert {len(i.prior_interactions) for i in dataset.instances} == {5}
    manifest = json.loads((out / "synth_manifest.json").read_text())
    assert manifest["models"]["user_simulator"]["model"] == "user"
    assert manifest["models"]["decomposer"]["model"] == "gen"  # defaults to the generator
    # the per-role specs are used: each role's calls are counted under its own model
    usage = json.loads((out / "summary.json").read_text())["usage"]["per_model"]
    assert set(usage) == {"scripted/gen", "scripted/user", "scripted/assistant", "scripted/judge"}

    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "calls 0" in again.output

    changed = runner.invoke(app, [*args[:-1], "--seed", "1", "--no-progress"])
    assert changed.exit_code == 2 and "another configuration" in changed.output


def test_synth_cupid_rejects_impossible_sizes(tmp_path: Path) -> None:
    result = runner.invoke(app, ["synth", "cupid", "--out", str(tmp_path), "--sessions", "7"])
    assert result.exit_code == 2 and "n_sessions" in result.output


def test_synth_hicupid_command(tmp_path: Path) -> None:
    out = tmp_path / "h"
    args = ["synth", "hicupid", "--out", str(out), "-g", "scripted/g", "--users", "2", "--personas", "4",
            "--schedules", "2", "--multi", "1", "--rounds", "2", "--no-cache", "--no-progress"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2/2 users generated, 2 passed validation" in result.output
    qa = [json.loads(line) for line in (out / "qa.jsonl").read_text().splitlines()]
    assert len(qa) == 2 * (4 + 1 + 2)


def test_synth_benchpres_and_the_labels_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "b"
    args = ["synth", "benchpres", "--out", str(out), "-g", "scripted/g", "--labeler", "scripted/l",
            "--profiles", "2", "--facts", "4", "--contexts-per-domain", "1", "--no-cache",
            "--no-progress"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2/2 profiles generated" in result.output and "unverified" in result.output
    lines = (out / "labels.csv").read_text().splitlines()
    assert len(lines) == 1 + 2 * 5 * 5
    bad = runner.invoke(app, ["synth", "benchpres-labels", str(out)])
    assert bad.exit_code == 2 and "no final label" in bad.output
    header, *rows = lines
    filled = [header] + [row + "suppress" if row.endswith(",") else row for row in rows]
    (out / "labels.csv").write_text("\n".join(filled) + "\n")
    good = runner.invoke(app, ["synth", "benchpres-labels", str(out)])
    assert good.exit_code == 0, good.output
    assert "10 rows (0 apply, 50 suppress)" in good.output


def test_synth_exits_non_zero_when_nothing_passes(tmp_path: Path) -> None:
    # a leak threshold this low rejects every persona (any shared word counts as a leak)
    args = ["synth", "cupid", "--out", str(tmp_path / "o"), "-g", "scripted/g", "--personas", "1",
            "--sessions", "9", "--factors", "3", "--max-turns", "1", "--leak-threshold", "0.01",
            "--no-cache", "--no-progress"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 4  # the documented code for "too many errors", not 1 (internal error)
    assert "0 passed validation" in result.output and "leak (lexical)" in result.output


def test_synth_cupid_verifier_options(tmp_path: Path) -> None:
    out = tmp_path / "v"
    base = ["synth", "cupid", "--out", str(out), "-g", "scripted/gen", "--personas", "1", "--factors", "3",
            "--sessions", "9", "--max-turns", "2", "--no-cache", "--no-progress"]  # fmt: skip
    result = runner.invoke(app, base)
    assert result.exit_code == 0, result.output
    assert "verifier: 3 instances checked, 3 verified, 0 repaired, 0 dropped" in result.output
    pid = next(iter(json.loads((out / "validation.json").read_text())))
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"persona_id": pid, "instance_type": "changing", "valid": True}) + "\n")
    again = runner.invoke(app, [*base, "--verify-against", str(labels)])
    assert again.exit_code == 0, again.output
    assert "agreement with" in again.output and "n 1, accuracy 1.0" in again.output
    skipped = runner.invoke(app, [*base[:3], str(tmp_path / "n"), *base[4:], "--no-verify"])
    assert skipped.exit_code == 0 and "verifier:" not in skipped.output
    assert json.loads((tmp_path / "n" / "summary.json").read_text())["verification"] is None


def test_a_hosted_generator_needs_an_explicit_weaker_assistant(tmp_path: Path) -> None:
    from personalign.benchmarks.cupid.synth import default_assistant

    assert default_assistant("scripted/g", None) == "scripted/g"
    assert default_assistant("openai/gpt-4o", "generator") == "openai/gpt-4o"
    assert default_assistant("openai/gpt-4o", "together/x") == "together/x"
    result = runner.invoke(
        app, ["synth", "cupid", "--out", str(tmp_path / "o"), "-g", "openai/gpt-4o", "--no-progress"]
    )
    assert result.exit_code == 2 and "--assistant" in result.output
    assert not (tmp_path / "o").exists()  # refused before anything was written or asked


def test_more_units_than_seeds_are_refused_unless_reuse_is_allowed(tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text(
        "".join(
            json.dumps({"occupation": "nurse", "description": f"A nurse, number {k}."}) + "\n"
            for k in range(2)
        )
    )
    for pipeline, flag in (("cupid", "--personas"), ("hicupid", "--users"), ("benchpres", "--profiles")):
        args = ["synth", pipeline, "--out", str(tmp_path / pipeline), "-g", "scripted/g", flag, "3",
                "--seeds", str(seeds), "--no-cache", "--no-progress"]  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (pipeline, result.output)
        assert "seeds.jsonl" in result.output and "--allow-seed-reuse" in result.output


def test_personas_and_users_take_distinct_seeds_while_there_are_enough() -> None:
    from personalign.benchmarks.cupid.synth import persona_templates
    from personalign.benchmarks.hicupid.synth import (
        HicupidSynthConfig,
        profile_seed,
        relations_for,
        user_plans,
    )
    from personalign.synth.common import PersonaSeed

    seeds = [PersonaSeed(occupation="nurse", description=f"A nurse, number {k}.") for k in range(3)]
    templates = persona_templates(seeds, 3, seed=0)
    assert len({t["seed"] for t in templates}) == 3  # one occupation, three distinct seeds
    plans = user_plans(HicupidSynthConfig(generator="scripted/g", n_users=40))
    assert len({p["seed"] for p in plans}) == 40  # the 40 bundled seeds, none twice
    for plan in plans:
        assert all(p["relation"] in relations_for(p["category"]) for p in plan["personas"])
    assert "has been to" not in relations_for("Religion") and "owns" in relations_for("Car")
    assert profile_seed(0, 1) != profile_seed(0, 2) and profile_seed(1, 0) != profile_seed(0, 1)


def _toy_synth(synth_app: typer.Typer) -> None:
    """A third-party benchmark's synth hook: one command, its own option plus the shared ones."""

    @synth_command(synth_app, "toy", "widgets")
    def synth_toy(run: SynthRun, widgets: Annotated[int, typer.Option(help="How many.")] = 1) -> None:
        """Toy widgets."""
        typer.echo(f"toy {widgets} {run.generator} {run.out} seed={run.seed} {run.settings()['seeds_file']}")


def test_synth_group_is_registry_driven_with_the_shared_options(tmp_path: Path) -> None:
    from personalign import registry
    from personalign.cli_synth import _synth_commands

    registry.register("toy", SimpleNamespace(name="toy", synth=_toy_synth))
    _synth_commands.cache_clear()
    try:
        listing = runner.invoke(app, ["synth", "--help"])
        assert all(name in listing.output for name in ("cupid", "hicupid", "benchpres", "toy"))
        result = runner.invoke(
            app,
            ["synth", "toy", "--widgets", "3", "-g", "scripted/x", "--out", str(tmp_path / "t"),
             "--seed", "7", "--seeds", str(tmp_path / "s.jsonl")],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert f"toy 3 scripted/x {tmp_path / 't'} seed=7 {tmp_path / 's.jsonl'}" in result.output
        default = runner.invoke(app, ["synth", "toy"])
        assert "toy 1 local/smollm2 synth/toy seed=0 None" in default.output
    finally:
        registry.unregister("toy")
        _synth_commands.cache_clear()
    assert "toy" not in runner.invoke(app, ["synth", "--help"]).output


def test_cli_synth_names_no_benchmark() -> None:
    """The synth group learns its commands from the specs' `synth` hooks only."""
    import personalign.cli_synth as module

    text = Path(module.__file__).read_text()
    assert not any(name in text for name in ('"cupid"', '"hicupid"', '"benchpres"', "synthesize_"))


def test_synth_seeds_personahub_offline_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    result = runner.invoke(
        app,
        ["synth", "hicupid", "-g", "scripted/x", "--seeds", "personahub", "--out", str(tmp_path / "h"),
         "--no-progress", "--no-cache"],
    )  # fmt: skip
    assert result.exit_code != 0
    assert "cannot load proj-persona/PersonaHub" in result.output and "bundled seeds" in result.output
