"""An open-loop load generator for OpenAI-compatible completion endpoints (vLLM, SGLang).

Open loop on purpose: closed-loop clients always saturate an engine (each finished
request is replaced at once), so a fix can only be verified under an arrival process the
fixed engine can serve. Requests arrive on a Poisson schedule, or replay a recorded
trace, whatever the engine does; the report says what was sent and what came back.
Django-free; prompts are token ids, so it works against ``--skip-tokenizer-init``.
"""

from loadgen.plan import LengthMix, PlanError, PlannedRequest, load_trace, poisson_plan
from loadgen.report import Outcome, summarize

__all__ = [
    "LengthMix",
    "Outcome",
    "PlanError",
    "PlannedRequest",
    "load_trace",
    "poisson_plan",
    "summarize",
]
