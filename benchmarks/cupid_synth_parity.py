"""Byte parity of `synth cupid --protocol paper` with the official synthesis code (kixlab/CUPID, pinned).

Imports the official persona, context-factor and session generators, the decomposer and the
interaction simulator from a checkout (``--upstream``), with the model calls of `utils.generation`
replaced by a capture that answers with canned replies, runs them on one persona template (the
session generator's random journey structure made to draw our plan's positions), a few sessions,
then runs our paper-protocol stages (`CupidSynthesizer`, scripted models giving the same canned
replies) on the same inputs and compares every message list the models receive (roles, order,
text), its temperature and its token budget. Prints the count of identical calls and a diff of any that
differ. No official code is stored in this repository.

    git --git-dir=/work/.mirror/kixlab+CUPID/repo archive a8560ca | tar -x -C /tmp/cupid-upstream
    PYTHONPATH=src python benchmarks/cupid_synth_parity.py --upstream /tmp/cupid-upstream
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from personalign.benchmarks.cupid import synth as cs
from personalign.benchmarks.cupid import synth_paper as sp
from personalign.benchmarks.cupid.synth import CupidModels, CupidSynthConfig, CupidSynthesizer
from personalign.llm import GenerateConfig, ModelFactory, parse_model_spec
from personalign.llm.backends import Backend
from personalign.llm.backends.scripted import ScriptedBackend
from personalign.synth.common import Stage, StateStore, UnitState
from personalign.types import Message

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cupid_parity import _stub_modules

PERSONA = "Mara, a harbour pilot in her forties who plans her week on Sunday evenings."
SESSIONS: list[dict[str, Any]] = [
    {
        "id": 0,
        "context_factor": "Harbour board reports",
        "preference": "Open with the tide table and stay under 200 words.",
        "request_with_factor": "Draft my weekly note for the harbour board.\n",
        "resource": None,
    },
    {
        "id": 1,
        "context_factor": "Crew rota",
        "preference": "List shifts as a table sorted by start time.",
        "request_with_factor": "Tidy up this rota: [resource]",
        "resource": "Mon 06:00 Ana; Sun 22:00 Bo",
    },
]
CHECKLISTS = [["Does it open with the tide table?", "Is it under 200 words?"], ["Is it a table?"]]
MAX_TURNS = 3
# The persona template (the official keys; ours adds the occupation) and the journey plan.
TEMPLATE: dict[str, Any] = {
    "id": 0,
    "seed": "A harbour pilot who keeps a logbook of every tide.",
    "occupation": "harbour pilot",
    "career_level": "senior-level",
    "personality_traits": ["High Conscientiousness", "Low Extroversion"],
    "personal_values": ["Security", "Benevolence"],
    "decision_making_styles": "Analytical",
}
N_SESSIONS = 9
PLAN = ["other", "A", "B", "A", "other", "A_changed", "B", "A_changed", "A_changed"]
FACTORS: list[dict[str, Any]] = [
    {
        "factor_type": "Person", "background": "Her deputy since spring.", "factor": "Deputy Joss",
        "task_types": ["Communicating"], "preference_type": "Tone",
        "preference": "Notes to Joss should be warm and end with a question.", "related_factor": "N/A",
    },
    {
        "factor_type": "Organization/Institution", "background": "The board that licenses pilots.",
        "factor": "Harbour board", "task_types": ["Planning", "Writing"], "preference_type": "Format",
        "preference": "Board documents open with the tide table.", "related_factor": "Fishing co-op",
    },
    {
        "factor_type": "Organization/Institution", "background": "The co-op she advises.",
        "factor": "Fishing co-op", "task_types": ["Planning", "Writing"], "preference_type": "Format",
        "preference": "Co-op documents open with the catch quotas.", "related_factor": "Harbour board",
    },
]  # fmt: skip
CHANGED = "Board documents open with the berth schedule."

Call = dict[str, Any]


def _yaml(value: Any) -> str:
    import yaml

    return "```yaml\n" + str(yaml.dump(value, sort_keys=False)) + "```"


def journey() -> str:
    """The session generator's answer: A is the first option (the board), B the co-op."""
    rows = []
    for i, role in enumerate(PLAN):
        factor = FACTORS[1] if role in ("A", "A_changed") else FACTORS[2] if role == "B" else FACTORS[0]
        preference = CHANGED if role == "A_changed" else factor["preference"]
        rows.append(
            {
                "id": i + 1, "context_factor": factor["factor"], "preference": preference,
                "task_type": factor["task_types"][0], "story": f"Week {i + 1} at the harbour.",
                "request_with_factor_and_preference": f"Note {i + 1}. {preference}",
                "request_with_factor": f"Draft note {i + 1} for {factor['factor']}.", "resource": None,
            }
        )  # fmt: skip
    return _yaml({"scenarios": rows})


def canned(system: str | None, messages: Sequence[dict[str, str]]) -> str:
    """The same answers for both sides: the persona's JSON, the factors' and the journey's YAML, the
    decomposer's JSON, the user simulator's sections (CONTINUE, then END), the assistant's reply."""
    text = (system or "") + "\n".join(m["content"] for m in messages)
    if '"personas"' in (system or ""):
        persona = {"description": PERSONA, "occupation": "harbour pilot"}
        return "```json\n" + json.dumps({"personas": [persona]}) + "\n```"
    if "scenarios:" in (system or ""):
        return journey()
    if "context_factors:" in (system or ""):
        return _yaml({"context_factors": FACTORS})
    if '"checklist"' in text and len(messages) == 1:
        return '```json\n{"checklist": ["Does it open with the tide table?"]}\n```'
    if sp.YOUR_MESSAGE in text and messages and messages[0]["role"] == "assistant":
        turn = sum(1 for m in messages if m["role"] == "assistant")
        score, status = (6, "CONTINUE") if turn == 1 else (10, "END")
        return (
            f"{sp.EVALUATION}\n\n1. fine\n\n{sp.SCORE}\n\n{score}\n\n{sp.CONTINUE_OR_END}\n\n{status}\n\n"
            f"{sp.SELECTED}\n\n- 1. the first item\n\n{sp.THINKING}\n\nhm\n\n{sp.YOUR_MESSAGE}\n\n"
            f"Message {turn} from the user."
        )
    return f"Assistant reply {len(messages)}."


def official_calls(upstream: Path) -> list[Call]:
    """Every model call of the official generators, decomposer and interaction simulator, in order."""
    _stub_modules()  # the SDKs the official code imports, unreachable
    sys.path.insert(0, str(upstream))
    import utils.generation as generation  # type: ignore[import-not-found]
    from synthesis.modules.interaction_simulator import InteractionSimulator  # type: ignore[import-not-found]
    from synthesis.modules.preference_decomposer import (  # type: ignore[import-not-found]
        PreferenceDecomposer,
    )

    calls: list[Call] = []

    def record(
        system: str | None, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> str:
        flat = ([{"role": "system", "content": system}] if system is not None else []) + [
            dict(m) for m in messages
        ]
        calls.append({"messages": flat, "temperature": temperature, "max_tokens": max_tokens})
        return canned(system, messages)

    generation.generate = lambda model, system, prompt, temperature=0.0, max_tokens=1024, verbose=False: (
        record(system, [{"role": "user", "content": prompt}], temperature, max_tokens)
    )
    generation.generate_chat = (
        lambda model, system, messages, temperature=0.0, max_tokens=1024, verbose=False: record(
            system, list(messages), temperature, max_tokens
        )
    )
    import synthesis.modules.interaction_simulator as sim  # type: ignore[import-not-found]
    import synthesis.modules.preference_decomposer as dec  # type: ignore[import-not-found]
    import synthesis.modules.sessions_generator as ses  # type: ignore[import-not-found]
    from synthesis.modules.context_factors_generator import (  # type: ignore[import-not-found]
        ContextFactorsGenerator,
    )
    from synthesis.modules.persona_generator import PersonaGenerator  # type: ignore[import-not-found]

    for module in (sim, dec):  # they imported the names before the capture was in place
        for name in ("generate", "generate_chat"):
            if hasattr(module, name):
                setattr(module, name, getattr(generation, name))

    # The official journey structure draws its positions at random: make it draw our plan's.
    a_positions = [i for i, role in enumerate(PLAN[:-1]) if role in ("A", "A_changed")]
    b_positions = [i for i, role in enumerate(PLAN) if role == "B"]
    draws = iter([a_positions, b_positions])
    ses.random = type("Draws", (), {"sample": staticmethod(lambda population, k: list(next(draws)))})

    official_template = {k: v for k, v in TEMPLATE.items() if k != "occupation"}
    persona = PersonaGenerator(model_name="claude-3-5-sonnet-20241022")([dict(official_template)])[0]
    factors = ContextFactorsGenerator(model_name="claude-3-5-sonnet-20241022")(
        persona, n_factors=len(FACTORS)
    )
    ses.SessionsGenerator(model_name="claude-3-5-sonnet-20241022")(persona, factors, n_sessions=N_SESSIONS)
    decomposer = PreferenceDecomposer(model_name="gpt-4o-2024-11-20")
    for session in SESSIONS:
        decomposer(session["preference"])
    simulator = InteractionSimulator(model_name="gpt-4o-2024-11-20", response_model="assistant")
    for session, checklist in zip(SESSIONS, CHECKLISTS, strict=True):
        simulator({"description": PERSONA}, {**session, "checklist": checklist}, max_turns=MAX_TURNS + 1)
    return calls


class Capture(ScriptedBackend):
    """Our side: answers with the same canned replies and records what it was asked."""

    def __init__(self) -> None:
        super().__init__(self._answer)
        self.asked: list[Call] = []

    def _answer(self, messages: Sequence[Message], config: GenerateConfig) -> str:
        system = messages[0].content if messages and messages[0].role == "system" else None
        rest = [{"role": m.role, "content": m.content} for m in messages[1 if system is not None else 0 :]]
        self.asked.append(
            {
                "messages": [{"role": m.role, "content": m.content} for m in messages],
                "temperature": config.temperature,
                "max_tokens": config.max_tokens,
            }
        )
        return canned(system, rest)


def our_calls(upstream: Path) -> list[Call]:
    """The same stages through our paper protocol, in the same order."""
    backend = Capture()
    spec = "scripted/parity"
    backends: dict[str, Backend] = {str(parse_model_spec(spec)): backend}
    factory = ModelFactory(cache=None, backends=backends)
    model = factory.get(spec)
    config = CupidSynthConfig(
        generator=spec, user_simulator=spec, assistant=spec, decomposer=spec, n_personas=1, n_factors=3,
        n_sessions=N_SESSIONS, max_turns=MAX_TURNS, protocol="paper",
        temperature=dict(cs.PAPER_TEMPERATURES), max_tokens={**cs.MAX_TOKENS, **cs.PAPER_MAX_TOKENS},
    )  # fmt: skip
    paper = sp.load_paper_synth_prompts(upstream)
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(Path(tmp))
        models = CupidModels(generator=model, user_simulator=model, assistant=model, decomposer=model)
        synth = CupidSynthesizer(config, models, store, paper)
        stage = Stage(UnitState(unit_id="parity"), store)

        synth._plan_roles = lambda factors, pid: list(PLAN)  # type: ignore[method-assign]  # the same draw

        async def run() -> None:
            persona = await synth._persona(stage, dict(TEMPLATE))
            factors = await synth._factors(stage, persona)
            await synth._paper_sessions(stage, persona, factors, "parity", paper)
            await synth._checklists(stage, SESSIONS)
            for session, checklist in zip(SESSIONS, CHECKLISTS, strict=True):
                await synth._dialogue(stage, {"description": PERSONA}, session, checklist)
            await factory.aclose()

        asyncio.run(run())
    return backend.asked


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--upstream", type=Path, required=True, help="a checkout of kixlab/CUPID at the pin")
    args = parser.parse_args()
    ours = our_calls(args.upstream)
    theirs = official_calls(args.upstream)
    same = 0
    for k, (a, b) in enumerate(zip(theirs, ours, strict=False)):
        if a == b:
            same += 1
            continue
        print(f"call {k} differs:")
        left = json.dumps(a, indent=1).splitlines()
        right = json.dumps(b, indent=1).splitlines()
        print("\n".join(list(difflib.unified_diff(left, right, "official", "personalign", lineterm=""))[:60]))
    print(f"{same}/{max(len(theirs), len(ours))} calls identical (official {len(theirs)}, ours {len(ours)})")
    sys.exit(0 if same == len(theirs) == len(ours) else 1)


if __name__ == "__main__":
    main()
