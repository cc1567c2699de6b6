"""The SLO spec: a versioned file owned by a team, validated strictly.

It says which SLO classes exist, how a request is put into one, the objective of each SLO
and the compliance period. It drives the exporter (classification, default targets, the spec
as series) and, later, the generated dashboards and alert rules. Deployment concerns
(listeners, limits, attribute names) live in :mod:`sloscope.config`, never here.
"""

from __future__ import annotations

import fnmatch
import math
import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, model_validator

SPEC_VERSION = "sloscope/v1"

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: object) -> object:
    """Accept Prometheus-style durations (``30s``, ``6h``, ``28d``) as well as plain seconds."""
    if isinstance(value, str):
        match = _DURATION.match(value.strip())
        if not match:
            raise ValueError(f"not a duration: {value!r} (use a number and one of s, m, h, d, w, like 28d)")
        return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    return value


Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Range(_Strict):
    """A closed range of a request's SLO target in milliseconds; the target must be present to match."""

    min: float | None = Field(default=None, ge=0, description="Smallest target that matches (inclusive).")
    max: float | None = Field(default=None, gt=0, description="Largest target that matches (inclusive).")

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is greater than max {self.max}")
        return self

    def contains(self, value_ms: float | None) -> bool:
        if value_ms is None:
            return False
        if self.min is not None and value_ms < self.min:
            return False
        return self.max is None or value_ms <= self.max


class Match(_Strict):
    """Conditions a request must all meet to belong to a class. An empty match takes every request."""

    models: list[str] = Field(
        default_factory=lambda: ["*"], description="Shell-style patterns of the served model name."
    )
    has_slo: bool | None = Field(
        default=None, description="true: the request carries a TTFT or TPOT target; false: it carries none."
    )
    ttft_ms: Range | None = Field(default=None, description="Range of the request's TTFT target.")
    tpot_ms: Range | None = Field(default=None, description="Range of the request's TPOT target.")


class Objectives(_Strict):
    """Share of eligible requests that must meet each SLO over the compliance period."""

    ttft: float = Field(default=0.99, gt=0, lt=1)
    tpot: float = Field(default=0.99, gt=0, lt=1)
    goodput: float = Field(default=0.95, gt=0, lt=1)

    def of(self, slo: str) -> float:
        return float(getattr(self, slo))


class DefaultTargets(_Strict):
    """Targets for requests of the class that carry none.

    Opt-in: as in the EPP, by default a request without SLO headers has no SLO.
    """

    ttft_ms: float | None = Field(default=None, gt=0)
    tpot_ms: float | None = Field(default=None, gt=0)


class Reference(_Strict):
    """The request each pod's live headroom is judged on, for this class.

    Its targets default to the class's default targets, else to the loosest target the class's
    match admits (``match.ttft_ms.max``): the request that just belongs to the class.
    """

    prompt_tokens: int = Field(default=512, ge=0, description="Prompt length in tokens.")
    ttft_ms: float | None = Field(default=None, gt=0, description="TTFT target of the reference request.")
    tpot_ms: float | None = Field(default=None, gt=0, description="TPOT target of the reference request.")
    prefix_cache_score: float = Field(default=0.0, ge=0, le=1, description="Its prefix-cache hit ratio.")


Aborts = Literal["by_deadline", "always", "never"]
ABORTS_BY_DEADLINE, ABORTS_ALWAYS, ABORTS_NEVER = "by_deadline", "always", "never"


class SLOClass(_Strict):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$", max_length=40)]
    description: str = ""
    match: Match = Field(default_factory=Match)
    defaults: DefaultTargets = Field(default_factory=DefaultTargets)
    objectives: Objectives = Field(default_factory=Objectives)
    compliance_period: Seconds | None = Field(
        default=None, description="Overrides the spec's compliance period for this class."
    )
    reference: Reference = Field(default_factory=Reference)
    aborts: Aborts = Field(
        default="by_deadline",
        description="How a request the client left before its answer counts: by_deadline, a miss of each SLO whose "
        "deadline had passed when the client left (no first token by the TTFT target) and of no other; always, a "
        "miss of every SLO it carried; never, of none (it is still counted as failed).",
    )

    def reference_targets(self) -> tuple[float | None, float | None]:
        """(TTFT, TPOT) targets of the reference request in milliseconds; None where the class has none."""
        ref, defaults, match = self.reference, self.defaults, self.match
        ttft = ref.ttft_ms or defaults.ttft_ms or (match.ttft_ms.max if match.ttft_ms else None)
        tpot = ref.tpot_ms or defaults.tpot_ms or (match.tpot_ms.max if match.tpot_ms else None)
        return ttft, tpot


class SLOSpec(_Strict):
    """The whole spec. ``version`` must be ``sloscope/v1``."""

    version: Literal["sloscope/v1"]
    service: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$", max_length=40)] = "llm-inference"
    compliance_period: Seconds = Field(default=28 * 86400, description="Default compliance period (28d).")
    classes: list[SLOClass] = Field(default_factory=list, description="Tried in order; the first match wins.")
    default_class: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$", max_length=40)] = Field(
        default="none", description="Class of requests no class matches."
    )

    @model_validator(mode="after")
    def _unique_names(self) -> SLOSpec:
        names = [c.name for c in self.classes]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"class names must be unique; repeated: {', '.join(duplicates)}")
        if self.default_class in names:
            raise ValueError(f"default_class {self.default_class!r} must not also be a listed class")
        return self

    # Requests repeat the same (model, targets) combinations: remembering the answer spares the
    # pattern matching on the hot path. Bounded: cleared when full.
    _classified: dict[tuple[str, float | None, float | None], SLOClass | None] = PrivateAttr(default_factory=dict)

    def period_of(self, cls: SLOClass) -> float:
        return cls.compliance_period if cls.compliance_period is not None else self.compliance_period

    def classify(self, model: str, ttft_ms: float | None, tpot_ms: float | None) -> SLOClass | None:
        """The first class whose match holds for this request, or None for ``default_class``."""
        key = (model, ttft_ms, tpot_ms)
        cache = self._classified
        if key in cache:
            return cache[key]
        found = next((cls for cls in self.classes if _matches(cls.match, model, ttft_ms, tpot_ms)), None)
        if len(cache) >= _CLASSIFY_CACHE_SIZE:
            cache.clear()
        cache[key] = found
        return found


_CLASSIFY_CACHE_SIZE = 10_000


def _matches(match: Match, model: str, ttft_ms: float | None, tpot_ms: float | None) -> bool:
    if not any(fnmatch.fnmatchcase(model, pattern) for pattern in match.models):
        return False
    if match.has_slo is not None and match.has_slo != (ttft_ms is not None or tpot_ms is not None):
        return False
    if match.ttft_ms is not None and not match.ttft_ms.contains(ttft_ms):
        return False
    return match.tpot_ms is None or match.tpot_ms.contains(tpot_ms)


def is_valid_target(value_ms: float | None) -> bool:
    return value_ms is not None and math.isfinite(value_ms) and value_ms > 0
