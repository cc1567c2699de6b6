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
from typing import Any, Generic

from sloscope.upstream.writer import Drawn, Handle, Process, Scope, SpanWriter

__all__ = ["DEFAULT_SCORERS", "Epp", "epp_process"]

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


def epp_process(pool: str | None = None) -> Process:
    """telemetry.go:109-117: service.name (runner.go:241), service.version, OTEL_RESOURCE_ATTRIBUTES (the operator
    names the pool), the schema URL of semconv v1.37.0; resource.Default deliberately not merged."""
    attributes: dict[str, Any] = {"service.name": "llm-d-epp", "service.version": BUILD_REF}
    if pool is not None:
        attributes["k8s.inferencepool.name"] = pool
    return Process(attributes, SEMCONV_1_37)


def _scope(name: str) -> Scope:
    return Scope(name, BUILD_REF, {"commit-sha": COMMIT})  # telemetry.go:185-201


class Epp(Generic[Handle]):
    """One EPP process writing through ``writer``; times are Unix nanoseconds."""

    def __init__(self, writer: SpanWriter[Handle], process: Process | None = None) -> None:
        self.writer = writer
        self.process = process or epp_process()
        self.handlers, self.requestcontrol = _scope(HANDLERS), _scope(REQUESTCONTROL)
        self.scheduling, self.plugins = _scope(SCHEDULING), _scope(SCHEDULING_PLUGINS)

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
        """run_scheduler_profile with its children filter_endpoints, llm_d.epp.scoring (a child per scorer; the
        score keys only for a scorer that returned scores, not for those in ``unscored``) and pick_endpoints;
        gen_ai.request.model only when the target model is known (requestSpanAttributes,
        scheduler_profile.go:321). Returns the run's end."""
        request: dict[str, Any] = {"gen_ai.request.id": request_id}
        if model:
            request["gen_ai.request.model"] = model
        span, scheduling = self._span, self.scheduling

        def at(ms: float) -> int:
            return start_ns + round(ms * MS)

        end = at(1.0 + 0.25 * len(scorers))
        run = span(
            scheduling, "run_scheduler_profile", orchestration, start_ns, end,
            attributes={"llm_d.epp.scheduling.profile.name": profile},
        )  # fmt: skip
        filtered = {
            "llm_d.epp.filter.candidate_endpoints": 3,
            **request,
            "llm_d.epp.filter.filtered_endpoints": len(picked),
        }
        span(scheduling, "filter_endpoints", run, at(0.05), at(0.2), attributes=filtered)
        scoring_end = at(0.3 + 0.25 * len(scorers))
        scoring = span(
            scheduling, "llm_d.epp.scoring", run, at(0.25), scoring_end,
            attributes={
                "llm_d.epp.scorer.count": len(scorers), "llm_d.epp.scoring.candidate_endpoints": len(picked), **request
            },
        )  # fmt: skip
        for i, scorer in enumerate(scorers):
            attributes: dict[str, Any] = {
                "llm_d.epp.scorer.type": scorer,
                "llm_d.epp.scorer.name": scorer,
                "llm_d.epp.scorer.weight": SCORER_WEIGHTS.get(scorer, 1.0),
                "llm_d.epp.scorer.candidate_endpoints": len(picked),
            }
            if scorer not in unscored:
                attributes["llm_d.epp.scorer.score.max"] = 0.82
                attributes["llm_d.epp.scorer.score.avg"] = 0.41
                attributes["llm_d.epp.scorer.endpoints_scored"] = len(picked)
            first = at(0.3 + 0.25 * i)
            span(scheduling, f"llm_d.epp.scorer.{scorer}", scoring, first, first + round(0.2 * MS),
                 attributes=attributes)  # fmt: skip
        picks = {
            "llm_d.epp.picker.candidate_endpoints": len(picked),
            "llm_d.epp.picker.top_endpoints": list(picked),
            "llm_d.epp.picker.top_scores": [2.31, 1.07][: len(picked)],
            **request,
        }
        span(scheduling, "pick_endpoints", run, scoring_end + round(0.05 * MS), end - round(0.05 * MS),
             attributes=picks)  # fmt: skip
        return end

    def disaggregate(
        self, orchestration: Handle, start_ns: int, *, request_id: str, model: str, prefill_address: str
    ) -> None:
        """The disagg profile handler, decode first: three pick_disagg_profile spans around the decode and prefill
        profile runs, then prepare_disaggregation (PreRequest) with llm_d.epp.pd.disaggregation_used true."""
        picks: dict[str, Any] = {
            "gen_ai.request.model": model,
            "gen_ai.request.id": request_id,
            "mm.modality": "none",
            "mm.hash_count": 0,
        }
        at = start_ns
        step = round(0.1 * MS)
        phases = (("run_decode", "decode"), ("run_prefill", "prefill"), ("complete_prefill-decode", None))
        for decision, profile in phases:
            self._span(
                self.plugins, "pick_disagg_profile", orchestration, at, at + step,
                attributes={**picks, "llm_d.epp.profile_handler.decision": decision},
            )  # fmt: skip
            at += step
            if profile is not None:
                pods = ("llm-d/llama-decode-1-rank-0",) if profile == "decode" else ("llm-d/llama-prefill-0-rank-0",)
                at = self.schedule(orchestration, at, request_id=request_id, model=model, profile=profile, picked=pods)
        prepare = {
            **picks,
            "llm_d.epp.pd.disaggregation_used": True,
            "llm_d.epp.pd.prefill_pod_address": prefill_address,
            "llm_d.epp.pd.prefill_pod_port": "8000",
            "llm_d.epp.encode.disaggregation_used": False,
            "llm_d.epp.encode.reason": "no_encode_profile_result",
        }
        self._span(
            self.plugins, "prepare_disaggregation", orchestration, at + step, at + 3 * step,
            attributes=prepare,
        )  # fmt: skip

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
