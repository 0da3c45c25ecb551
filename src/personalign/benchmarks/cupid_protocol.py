"""Where CUPID's official evaluation prompts live: kixlab/CUPID at a pinned commit, each file sha256-pinned.

The texts themselves are never stored in this repository; they are read at run time through
`personalign.protocols.upstream` from a local checkout or the `protocol fetch` cache.
"""

from __future__ import annotations

from personalign.protocols.upstream import UpstreamSource

INFERRER_YAML = "prompts/evaluation/preference_inferrer.yaml"
MATCHER_YAML = "prompts/evaluation/preference_matcher.yaml"
PREFMATCHER_YAML = "prompts/evaluation/preference_matcher_model.yaml"
GENERATOR_YAML = "prompts/evaluation/response_generator.yaml"
JUDGE_YAML = "prompts/evaluation/response_judger.yaml"
DECOMPOSER_YAML = "prompts/synthesis/preference_decomposer.yaml"
MATCHER_PY = "evaluation/modules/preference_matcher.py"

SOURCE = UpstreamSource(
    name="cupid",
    repo="kixlab/CUPID",
    commit="a8560cab293ae98be4fe260689d58bddf96b51ef",
    license="MIT",
    files={
        INFERRER_YAML: "b20374118413bd228b67a6fc3ac210766ff2415f8c3014cc61b6b432e83be472",
        MATCHER_YAML: "71c5093971cf7e7836f7a295d6a43749ea038d8bfc959b6b70a267a370f2c1ac",
        PREFMATCHER_YAML: "7b6950efd93b094e54855bf0b3461e858e4db4e238c632320998b3f175931b94",
        GENERATOR_YAML: "ff560852a4bcd5f11f79e64b57c5233e7a74cecf757dedf6db8ede198e54e566",
        JUDGE_YAML: "254de52c9d88136b6d12745ee6d48507345de741bd31dd219a9968b53a3de0a9",
        DECOMPOSER_YAML: "3b93f7cd604ae5dfceb3c5d9ddcf8604c13e9e0312eca97c161a002120decef6",
        MATCHER_PY: "441c9162195d96274ac98b6b7732e9d3ef0eb72c424986a45b87492c8ccef6c9",
    },
)
