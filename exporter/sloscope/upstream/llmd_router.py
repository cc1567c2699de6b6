"""llm-d-router's EPP (v0.10, ebab6879): the spans it writes for one request, as the catalogue draws them.

``gateway.request`` (SERVER, no attributes; ``pkg/epp/handlers/server.go:460``) > ``gateway.request_orchestration``
(SERVER, ``target_model`` and ``request_prio``; ``pkg/epp/requestcontrol/director.go:241-267``) > per scheduling
profile run ``run_scheduler_profile`` (``pkg/epp/scheduling/scheduler.go:153-156``) with ``filter_endpoints``,
``llm_d.epp.scoring`` (one ``llm_d.epp.scorer.<type>`` per scorer) and ``pick_endpoints``
(``scheduler_profile.go:158-166, 224-236, 288-315, 363-382``); P/D adds the disagg profile handler's
``pick_disagg_profile`` spans and ``prepare_disaggregation`` (``disagg_profile_handler.go:341-421, 528-579``,
``director.go:370``). Resource and scopes: ``pkg/common/telemetry/telemetry.go:109-117, 185-201``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic

from sloscope.upstream.writer import Drawn, Handle, Process, Scope, SpanWriter

__all__ = ["DEFAULT_SCORERS", "Epp", "ProfileRun", "ScorerRun", "epp_process", "sample_run"]

COMMIT = "ebab687927f5331c1b39defcb579a07951bce56c"
BUILD_REF = "v0.0.0-ebab687"  # version.BuildRef as Dockerfile.epp stamps it (a made-up value)
SEMCONV_1_37 = "https://opentelemetry.io/schemas/1.37.0"
HANDLERS = "llm-d-router/pkg/epp/handlers"  # pkg/epp/handlers/server.go:278
REQUESTCONTROL = "llm-d-router/pkg/epp/requestcontrol"  # pkg/epp/requestcontrol/director.go:241
SCHEDULING = "llm-d-router/pkg/epp/scheduling"  # pkg/epp/scheduling/constants.go:21
SCHEDULING_PLUGINS = "llm-d-router/pkg/epp/framework/plugins/scheduling"  # .../scheduling/constants.go:22
# The chart's "default" profile without the latency predictor (config/charts/routerlib/templates/_config.yaml)
DEFAULT_SCORERS = ("queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer")
SCORER_WEIGHTS = {"queue-scorer": 2.0, "kv-cache-utilization-scorer": 2.0, "prefix-cache-scorer": 3.0}
PICKED = ("llm-d/vllm-0-rank-0", "llm-d/vllm-1-rank-0")
MS = 1_000_000


STEP = MS // 10  # what the disagg profile handler takes between profile runs, in the sample runs


@dataclass(frozen=True)
class ScorerRun:
    """One scorer of a profile run: its type, weight and the scores it returned (none: it returned none)."""

    kind: str
    weight: float
    scores: Sequence[float] = ()


@dataclass(frozen=True)
class ProfileRun:
    """One scheduling profile run: the endpoints it filtered (``candidates`` in, ``filtered`` out), its scorers,
    the picker's top endpoints (``<namespace>/<pod>-rank-<i>``) and their total scores, and when it ran."""

    profile: str
    start_ns: int
    end_ns: int
    candidates: int
    filtered: int
    scorers: Sequence[ScorerRun]
    top_endpoints: Sequence[str]
    top_scores: Sequence[float]


def sample_run(
    profile: str,
    start_ns: int,
    *,
    scorers: Sequence[str] = DEFAULT_SCORERS,
    unscored: Sequence[str] = (),
    picked: Sequence[str] = PICKED,
) -> ProfileRun:
    """A profile run with made-up values: 3 candidates, ``picked`` left, each scorer of its chart weight returning
    0.82 and 0.0 (but those in ``unscored``, which return none), lasting 1 ms and a quarter a scorer."""
    runs = [
        ScorerRun(kind, SCORER_WEIGHTS.get(kind, 1.0), () if kind in unscored else (0.82, 0.0)[: len(picked)])
        for kind in scorers
    ]
    end = start_ns + MS + len(scorers) * MS // 4
    return ProfileRun(profile, start_ns, end, 3, len(picked), runs, picked, (2.31, 1.07)[: len(picked)])


def epp_process(pool: str | None = None) -> Process:
    """telemetry.go:109-117: service.name (runner.go:241), service.version, OTEL_RESOURCE_ATTRIBUTES (the operator
    names the pool), the schema URL of semconv v1.37.0; resource.Default deliberately not merged."""
    attributes: dict[str, Any] = {"service.name": "llm-d-epp", "service.version": BUILD_REF}
    if pool is not None:
        attributes["k8s.inferencepool.name"] = pool
    return Process(attributes, SEMCONV_1_37)


def _disagg_attributes(*, request_id: str, model: str) -> dict[str, Any]:
    """What the disagg profile handler's spans all carry: the request, and no multimodal item."""
    return {"gen_ai.request.model": model, "gen_ai.request.id": request_id, "mm.modality": "none", "mm.hash_count": 0}


def _scope(name: str, build_ref: str) -> Scope:
    return Scope(name, build_ref, {"commit-sha": COMMIT})  # telemetry.go:185-201


class Epp(Generic[Handle]):
    """One EPP process writing through ``writer``; times are Unix nanoseconds. ``build_ref``: the version its
    scopes carry (the one its resource says, ``service.version``)."""

    def __init__(self, writer: SpanWriter[Handle], process: Process | None = None, build_ref: str = BUILD_REF) -> None:
        self.writer = writer
        self.process = process or epp_process()
        self.handlers, self.requestcontrol = _scope(HANDLERS, build_ref), _scope(REQUESTCONTROL, build_ref)
        self.scheduling, self.plugins = _scope(SCHEDULING, build_ref), _scope(SCHEDULING_PLUGINS, build_ref)

    def _span(self, scope: Scope, name: str, parent: Handle | None, start_ns: int, end_ns: int, **rest: Any) -> Handle:
        return self.writer.span(self.process, scope, Drawn(name, parent, start_ns, end_ns, **rest))

    def gateway(
        self, parent: Handle | None, start_ns: int, end_ns: int, *, status: str | None = None, error: str | None = None
    ) -> Handle:
        """gateway.request: SERVER, no attributes; on failure RecordError and an Error status with the error text,
        or an Error status with the response status code (server.go:377-383)."""
        return self._span(
            self.handlers, "gateway.request", parent, start_ns, end_ns,
            kind="server", status=status, error=error,
        )  # fmt: skip

    def orchestration(
        self,
        gateway: Handle,
        start_ns: int,
        end_ns: int,
        *,
        model: str | None,
        priority: int = 0,
        error: str | None = None,
    ) -> Handle:
        """gateway.request_orchestration: SERVER; target_model and request_prio set once HandleRequest got that far
        (absent when it failed before)."""
        attributes = {"target_model": model, "request_prio": priority} if model is not None else {}
        return self._span(
            self.requestcontrol, "gateway.request_orchestration", gateway, start_ns, end_ns,
            kind="server", attributes=attributes, error=error,
        )  # fmt: skip

    def schedule(
        self,
        orchestration: Handle,
        start_ns: int,
        *,
        request_id: str,
        model: str | None,
        profile: str = "default",
        scorers: Sequence[str] = DEFAULT_SCORERS,
        unscored: Sequence[str] = (),
        picked: Sequence[str] = PICKED,
    ) -> int:
        """A profile run with sample values (:func:`sample_run`); returns its end."""
        run = sample_run(profile, start_ns, scorers=scorers, unscored=unscored, picked=picked)
        self.run_profile(orchestration, run, request_id=request_id, model=model)
        return run.end_ns

    def run_profile(self, orchestration: Handle, run: ProfileRun, *, request_id: str, model: str | None) -> None:
        """run_scheduler_profile with its children filter_endpoints, llm_d.epp.scoring (a child per scorer; the
        score keys only for a scorer that returned scores) and pick_endpoints; gen_ai.request.model only when the
        target model is known (requestSpanAttributes, scheduler_profile.go:321). The run's time is shared out:
        filtering its first tenth, scoring (each scorer an equal part) until nine tenths, then picking."""
        request: dict[str, Any] = {"gen_ai.request.id": request_id}
        if model:
            request["gen_ai.request.model"] = model
        span, scheduling = self._span, self.scheduling
        t0, t1 = run.start_ns, run.end_ns
        cut1, cut2 = t0 + (t1 - t0) // 10, t0 + (t1 - t0) * 9 // 10
        top = span(
            scheduling, "run_scheduler_profile", orchestration, t0, t1,
            attributes={"llm_d.epp.scheduling.profile.name": run.profile},
        )  # fmt: skip
        filtered = {
            "llm_d.epp.filter.candidate_endpoints": run.candidates,
            **request,
            "llm_d.epp.filter.filtered_endpoints": run.filtered,
        }
        span(scheduling, "filter_endpoints", top, t0, cut1, attributes=filtered)
        scoring = span(
            scheduling, "llm_d.epp.scoring", top, cut1, cut2,
            attributes={
                "llm_d.epp.scorer.count": len(run.scorers), "llm_d.epp.scoring.candidate_endpoints": run.filtered,
                **request,
            },
        )  # fmt: skip
        step = (cut2 - cut1) // max(len(run.scorers), 1)
        for i, scorer in enumerate(run.scorers):
            attributes: dict[str, Any] = {
                "llm_d.epp.scorer.type": scorer.kind,
                "llm_d.epp.scorer.name": scorer.kind,
                "llm_d.epp.scorer.weight": scorer.weight,
                "llm_d.epp.scorer.candidate_endpoints": run.filtered,
            }
            if scorer.scores:  # a scorer that returned no scores (the predictor not ready) says no more
                attributes["llm_d.epp.scorer.score.max"] = max(scorer.scores)
                attributes["llm_d.epp.scorer.score.avg"] = sum(scorer.scores) / len(scorer.scores)
                attributes["llm_d.epp.scorer.endpoints_scored"] = len(scorer.scores)
            first = cut1 + i * step
            span(scheduling, f"llm_d.epp.scorer.{scorer.kind}", scoring, first, first + step, attributes=attributes)
        picks = {
            "llm_d.epp.picker.candidate_endpoints": run.filtered,
            "llm_d.epp.picker.top_endpoints": list(run.top_endpoints),
            "llm_d.epp.picker.top_scores": list(run.top_scores),
            **request,
        }
        span(scheduling, "pick_endpoints", top, cut2, t1, attributes=picks)

    def disaggregate(
        self, orchestration: Handle, start_ns: int, *, request_id: str, model: str, prefill_address: str
    ) -> None:
        """:meth:`disaggregated` with sample profile runs, one after the other from ``start_ns``."""
        decode = sample_run("decode", start_ns + STEP, picked=("llm-d/llama-decode-1-rank-0",))
        prefill = sample_run("prefill", decode.end_ns + STEP, picked=("llm-d/llama-prefill-0-rank-0",))
        end = prefill.end_ns + 3 * STEP
        self.disaggregated(
            orchestration, decode, prefill, request_id=request_id, model=model, prefill_address=prefill_address,
            prepared=(prefill.end_ns + STEP, end),
        )  # fmt: skip

    def disaggregated(
        self,
        orchestration: Handle,
        decode: ProfileRun,
        prefill: ProfileRun,
        *,
        request_id: str,
        model: str,
        prefill_address: str,
        prepared: tuple[int, int],
        port: int = 8000,
    ) -> None:
        """The disagg profile handler, decode first: a pick_disagg_profile span (an instant) as the decode run starts,
        one as the prefill run starts and one as it ends, then :meth:`prepare_disaggregation` over ``prepared``."""
        picks = _disagg_attributes(request_id=request_id, model=model)
        for decision, run, at in (
            ("run_decode", decode, decode.start_ns),
            ("run_prefill", prefill, prefill.start_ns),
            ("complete_prefill-decode", None, prefill.end_ns),
        ):
            self._span(
                self.plugins, "pick_disagg_profile", orchestration, at, at,
                attributes={**picks, "llm_d.epp.profile_handler.decision": decision},
            )  # fmt: skip
            if run is not None:
                self.run_profile(orchestration, run, request_id=request_id, model=model)
        self.prepare_disaggregation(
            orchestration, *prepared, request_id=request_id, model=model, prefill_address=prefill_address, port=port
        )

    def prepare_disaggregation(
        self,
        orchestration: Handle,
        start_ns: int,
        end_ns: int,
        *,
        request_id: str,
        model: str,
        prefill_address: str,
        port: int = 8000,
    ) -> Handle:
        """prepare_disaggregation, the disagg profile handler's PreRequest once the prefill run chose a pod
        (``disagg_profile_handler.go:528-579``, ``director.go:370``), under the orchestration: the pick spans'
        attributes, llm_d.epp.pd.disaggregation_used true with the prefill pod's address and port, and no encode
        stage."""
        prepare = {
            **_disagg_attributes(request_id=request_id, model=model),
            "llm_d.epp.pd.disaggregation_used": True,
            "llm_d.epp.pd.prefill_pod_address": prefill_address,
            "llm_d.epp.pd.prefill_pod_port": str(port),
            "llm_d.epp.encode.disaggregation_used": False,
            "llm_d.epp.encode.reason": "no_encode_profile_result",
        }
        return self._span(self.plugins, "prepare_disaggregation", orchestration, start_ns, end_ns, attributes=prepare)

    def call(
        self,
        parent: Handle | None,
        start_ns: int,
        end_ns: int,
        *,
        request_id: str,
        model: str | None,
        profile: str = "default",
        scorers: Sequence[str] | None = DEFAULT_SCORERS,
        priority: int = 0,
        status: str | None = None,
        orchestration_error: str | None = None,
    ) -> Handle:
        """A request the EPP took: gateway.request, its orchestration, and one profile run unless ``scorers`` is
        None (refused before scheduling). Returns the gateway span."""
        gateway = self.gateway(parent, start_ns, end_ns, status=status)
        orchestration = self.orchestration(
            gateway, start_ns + MS, start_ns + 6 * MS, model=model, priority=priority, error=orchestration_error
        )
        if scorers is not None:
            self.schedule(
                orchestration, start_ns + round(1.5 * MS), request_id=request_id, model=model, profile=profile,
                scorers=scorers,
            )  # fmt: skip
        return gateway
