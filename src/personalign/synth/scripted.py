"""Scripted answers to the synthesis prompts, for `scripted/...` models (tests and dry runs).

Answers are valid for the requested schema and derived deterministically from the prompt, so
a dry run produces well-formed (if bland) data and exercises every stage.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from personalign.llm.backends.scripted import register_schema_responder
from personalign.llm.types import GenerateConfig
from personalign.synth.taxonomy import FACTOR_TYPES, PREFERENCE_TYPES, TASK_TYPES
from personalign.types import Message

STYLES = (
    "use numbered steps",
    "stay under five sentences",
    "open with a one-line summary",
    "avoid technical jargon",
    "cite a source for every claim",
    "end with a checklist",
    "use a warm, informal tone",
    "use formal language",
)


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16)


def _field(text: str, name: str) -> str:
    match = re.search(rf"^{re.escape(name)}:\s*(.*)$", text, re.MULTILINE)
    return match.group(1).strip() if match else ""


def _pick(options: Sequence[str], key: str, offset: int = 0) -> str:
    return options[(_h(key) + offset) % len(options)]


def _persona(user: str, config: GenerateConfig) -> dict[str, Any]:
    first = ("Ana", "Ben", "Chen", "Dara", "Eli", "Femi", "Gita", "Hugo")
    occupation = _field(user, "Occupation") or "professional"
    name = f"{_pick(first, user)} {_pick(('Lopez', 'Okafor', 'Sato', 'Berg', 'Novak'), user, 3)}"
    description = (
        f"{name} works as a {occupation}. {_field(user, 'Starting point')} They are "
        f"{_field(user, 'Career level').split('/')[0].lower()} and decide in a "
        f"{_field(user, 'Decision-making style').lower()} way. They value "
        f"{_field(user, 'Values they care about most').lower()}. They use an AI assistant every week. "
        "They are busy and want help that fits each situation."
    )
    return {"name": name, "description": description}


def _factor(key: str, k: int, with_type: bool) -> dict[str, Any]:
    nouns = ("board", "client", "team", "report", "workshop", "archive", "clinic", "festival", "ledger")
    place = _pick(("North", "Harbor", "Cedar", "Summit", "River"), key, k)
    factor = f"{place} {nouns[(_h(key) + 7 * k) % len(nouns)]} {k + 1}"
    row: dict[str, Any] = {
        "background": f"The user deals with {factor} regularly and it shapes their work.",
        "factor": factor,
        "task_types": [TASK_TYPES[(_h(key) + k) % len(TASK_TYPES)]],
        "preference_type": PREFERENCE_TYPES[(_h(key) + 3 * k) % len(PREFERENCE_TYPES)],
        "preference": f"Anything for {factor} must {STYLES[(_h(key) + k) % len(STYLES)]}.",
    }
    if with_type:
        row = {"background": row.pop("background"), "factor_type": FACTOR_TYPES[k % len(FACTOR_TYPES)], **row}
    return row


def _factors(user: str, config: GenerateConfig) -> dict[str, Any]:
    assert config.json_schema is not None
    n = int(config.json_schema["properties"]["factors"]["minItems"])
    first = _factor(user, n, False)
    second = _factor(user, n + 1, False)
    first["preference"] = f"Anything for {first['factor']} must be long, detailed and formal."
    second["preference"] = f"Anything for {second['factor']} must be short, casual and playful."
    return {
        "factors": [_factor(user, k, True) for k in range(n)],
        "contrastive_pair": {"factor_type": FACTOR_TYPES[0], "first": first, "second": second},
    }


def _changed(user: str, config: GenerateConfig) -> dict[str, Any]:
    factor = _field(user, "Context factor")
    style = _pick(STYLES, user, 5)
    return {
        "preference_type": _pick(PREFERENCE_TYPES, user),
        "preference": f"Now, help with {factor} should {style}.",
        "conflict": "It overturns what the user asked for before.",
    }


def _session(user: str, config: GenerateConfig) -> dict[str, Any]:
    factor = _field(user, "Context factor")
    preference = _field(user, "The user's preference")
    episode = re.search(r"^Episode (\d+)", user, re.MULTILINE)
    number = episode.group(1) if episode else "1"
    tasks = [t.strip() for t in _field(user, "Suitable task types").split(",") if t.strip()] or [
        TASK_TYPES[0]
    ]
    request = f"I am working on something for {factor} (episode {number}). Can you help me draft it?"
    return {
        "task_type": tasks[0] if tasks[0] in TASK_TYPES else TASK_TYPES[0],
        "story": f"In episode {number} the user prepares material for {factor}.",
        "request_with_factor_and_preference": f"{request} {preference}",
        "request_with_factor": request,
        "resource": "" if _h(user) % 3 else f"Notes for {factor}: draft v{number}.",
    }


def _checklist(user: str) -> list[str]:
    block = user.split("Checklist:", 1)[-1].split("\n\n", 1)[0]
    return re.findall(r"^\d+\. (.*)$", block, re.MULTILINE)


def _user_turn(user: str, config: GenerateConfig) -> dict[str, Any]:
    """Scores 5, 6, then 10; each message quotes the items it refers to (so the scripted verifier
    can find them), and the closing one quotes every item not referred to before."""
    assert config.json_schema is not None
    n = int(config.json_schema["properties"]["met"]["minItems"])
    items = _checklist(user) or [f"item {k}" for k in range(1, n + 1)]
    replies = user.count("[AI assistant]")
    done = replies >= 2
    closing = done or "This is your last message" in user
    unreferenced = [int(k) for k in re.findall(r"\d+", _field(user, "Items you have not referred to yet"))]
    met = [done or i == 1 for i in range(1, n + 1)]
    if closing:
        hinted = sorted(k for k in unreferenced if 1 <= k <= n)
    else:
        hinted = [next((i for i in range(1, n + 1) if not met[i - 1]), 1)]
    quoted = "; ".join(f"'{items[k - 1]}'" for k in hinted if k <= len(items))
    if done:
        message = "Thanks, this works for me" + (f", including {quoted}." if quoted else ".")
    else:
        message = "This is not quite what I can use here" + (f": think about {quoted}." if quoted else ".")
    return {"met": met, "score": 10 if done else 5 + replies, "hinted_items": hinted, "message": message}


def _leak(user: str, config: GenerateConfig) -> dict[str, Any]:
    preference = _field(user, "Hidden preference")
    request = user.split("Request:", 1)[-1]
    leaked = bool(preference) and preference.lower().rstrip(".") in request.lower()
    return {"states_preference": leaked, "evidence": preference[:80] if leaked else ""}


def _verify_items(user: str, config: GenerateConfig) -> dict[str, Any]:
    """An item counts as expressed when the user's messages quote it (as the scripted user does)."""
    said = user.split("What the user said in these conversations:", 1)[-1].lower()
    items = _checklist(user)
    expressed = [item.lower() in said for item in items]
    return {
        "expressed": expressed,
        "evidence": "; ".join(i for i, e in zip(items, expressed, strict=True) if e),
    }


def _verify_request(user: str, config: GenerateConfig) -> dict[str, Any]:
    preference = _field(user, "Preference")
    request = user.split("Request:", 1)[-1]
    inferable = bool(preference) and preference.lower().rstrip(".") in request.lower()
    return {"inferable": inferable, "evidence": preference[:80] if inferable else ""}


def _verify_change(user: str, config: GenerateConfig) -> dict[str, Any]:
    old, new = _field(user, "Old preference"), _field(user, "New preference")
    differs = old.lower().strip(" .") != new.lower().strip(" .")
    return {"contradicts": differs, "reason": "different requirements" if differs else "the same preference"}


def _lines(user: str) -> list[str]:
    return re.findall(r"^\d+\. (.*)$", user, re.MULTILINE)


def _h_profile(user: str, config: GenerateConfig) -> dict[str, Any]:
    seed = _field(user, "Description")
    words = [w.strip(".,").lower() for w in seed.split()]
    occupation = words[1] if len(words) > 1 else "worker"
    return {
        "age": 25 + _h(user) % 40,
        "gender": _pick(("female", "male", "non-binary"), user),
        "personality": _pick(("calm and careful", "outgoing and curious", "quiet and thorough"), user, 1),
        "occupation": occupation,
        "income_range": _pick(("$30,000-$50,000", "$50,000-$80,000", "$80,000-$120,000"), user, 2),
    }


def _h_personas(user: str, config: GenerateConfig) -> dict[str, Any]:
    things = ("Zephyr", "Quasar", "Nimbus", "Tundra", "Saffron", "Cobalt", "Juniper", "Marlow")
    return {
        "entities": [f"{_pick(things, line, k)} {line.split(':')[0]}" for k, line in enumerate(_lines(user))]
    }


def _h_schedules(user: str, config: GenerateConfig) -> dict[str, Any]:
    events = ("dentist appointment", "team budget review", "piano lesson", "school pickup", "yoga class")
    return {"events": [f"{_pick(events, line, k)} #{k + 1}" for k, line in enumerate(_lines(user))]}


def _h_persona_dialogue(user: str, config: GenerateConfig) -> dict[str, Any]:
    assert config.json_schema is not None
    n = int(config.json_schema["properties"]["turns"]["minItems"])
    trait = _field(user, "Trait")
    return {
        "turns": [
            {
                "user": f"Round {k + 1}: something came up, {trait[9:60]}.",
                "assistant": f"Noted, reply {k + 1}.",
            }
            for k in range(n)
        ]
    }


def _h_single(user: str, config: GenerateConfig) -> dict[str, Any]:
    return {
        "user": f"Can you help? By the way, {_field(user, 'Fact to mention')}.",
        "assistant": "Of course.",
    }


def _h_qa(user: str, config: GenerateConfig) -> dict[str, Any]:
    n = _h(user) % 1000
    return {
        "question": f"What would you suggest I do this weekend? (q{n})",
        "personalized_answer": "Given what you told me before, here is a plan that fits you.",
        "general_answer": "Here are some popular options that suit most people.",
    }


def _b_contexts(user: str, config: GenerateConfig) -> dict[str, Any]:
    domain = _field(user, "Domain")
    n = int(_field(user, "Number of items") or 1)
    roles = ("tax office", "bank manager", "admissions committee", "landlord", "hiring manager", "clinic")
    return {
        "contexts": [
            {
                "recipient": f"{roles[k % len(roles)]} {k + 1}",
                "task": f"Explain a {domain} matter, case {k + 1}.",
            }
            for k in range(n)
        ]
    }


def _b_profile(user: str, config: GenerateConfig) -> dict[str, Any]:
    n = int(_field(user, "Number of facts") or 1)
    name = f"{_pick(('Mara', 'Tomas', 'Lena', 'Ravi'), user)} {_pick(('Quinn', 'Diaz', 'Ito'), user, 1)}"
    return {
        "name": name,
        "sex": _pick(("female", "male"), user),
        "age": 30 + _h(user) % 40,
        "address": "Springfield",
        "facts": [f"I have personal detail number {k + 1}." for k in range(n)],
    }


def _b_preferences(user: str, config: GenerateConfig) -> dict[str, Any]:
    return {
        "role": "a pirate captain",
        "style": "as short bullet points",
        "tone": "cheerful and playful",
        "markers": "lots of emojis",
        "nickname": _pick(("Captain", "Sunny", "Ace"), user),
    }


def _b_labels(user: str, config: GenerateConfig) -> dict[str, Any]:
    n = len(_lines(user))
    formal = "tax" in user.lower()
    return {
        "labels": [
            {"apply": (not formal) and k in (1, 4), "reason": "fits" if k in (1, 4) else "too casual"}
            for k in range(n)
        ]
    }


RESPONDERS: dict[str, Callable[[str, GenerateConfig], dict[str, Any]]] = {
    "synth_persona": _persona,
    "synth_factors": _factors,
    "synth_changed_preference": _changed,
    "synth_contrast_preference": lambda user, config: {
        "preference_type": "Tone",
        "preference": f"Anything for {_field(user, 'Second')} must be blunt and brief.",
    },
    "synth_session": _session,
    "synth_user_turn": _user_turn,
    "synth_leak_check": _leak,
    "synth_verify_items": _verify_items,
    "synth_verify_request": _verify_request,
    "synth_verify_change": _verify_change,
    "synth_hicupid_profile": _h_profile,
    "synth_hicupid_personas": _h_personas,
    "synth_hicupid_schedules": _h_schedules,
    "synth_hicupid_persona_dialogue": _h_persona_dialogue,
    "synth_hicupid_single_dialogue": _h_single,
    "synth_hicupid_qa": _h_qa,
    "synth_benchpres_contexts": _b_contexts,
    "synth_benchpres_profile": _b_profile,
    "synth_benchpres_preferences": _b_preferences,
    "synth_benchpres_labels": _b_labels,
}


def register(name: str, responder: Callable[[str, GenerateConfig], dict[str, Any]]) -> None:
    RESPONDERS[name] = responder


def respond(messages: Sequence[Message], config: GenerateConfig) -> str:
    """The scripted answer to a synthesis prompt (by its schema name)."""
    user = next((m.content for m in messages if m.role == "user"), "")
    return json.dumps(RESPONDERS[config.schema_name](user, config))


def handles(config: GenerateConfig) -> bool:
    return config.json_schema is not None and config.schema_name in RESPONDERS


register_schema_responder("synth_", respond)
