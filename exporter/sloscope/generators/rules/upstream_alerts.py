"""The ``sloscope-upstream-alerts`` group: one alert per upstream-contract check, when the upstream no longer shows
what sloscope's numbers assume ("your SLO input changed"), instead of a flat or wrong graph."""

from __future__ import annotations

from typing import NamedTuple

from sloscope import conventions as c
from sloscope.generators.rules.common import Rule, _alert, _label, _selector
from sloscope.generators.rules.names import CONTRACT_ALERTS
from sloscope.generators.rules.thresholds import AlertThresholds
from sloscope.generators.windows import TICKET


class _Words(NamedTuple):
    summary: str
    consequence: str


_POOL = _label(c.POOL)
_WORDS = {
    c.CHECK_PREDICTOR_OBJECTIVE: _Words(
        "The pool's predictor does not state its objective.",
        f"The prediction servers of pool {_POOL} answer /status without objective_type although the pool's EPP is "
        "of a generation whose predictor states it (llm-d-router, GIE v1.5). sloscope then reads the predictions "
        "as quantiles: a mean predictor is judged by coverage, and its bias alerts cannot fire.",
    ),
    c.CHECK_PREDICTOR_ANSWERS: _Words(
        "The pool's predictor answers in a shape sloscope cannot read.",
        f"An endpoint of pool {_POOL}'s predictor (/status, /predict, /models/list or the training /metrics) "
        "answered 2xx with a body of another shape at the last poll: a predictor upgrade renamed or removed a "
        "field. Its health series, reset detection and objective freeze at their last values.",
    ),
    c.CHECK_STREAMING_MODE: _Words(
        "The EPP's streaming mode is not the one the settings name.",
        f"Pool {_POOL}'s EPP page shows its latency plugin with a streamingMode other than the pool's "
        "streaming_mode setting. sloscope follows the page (TTFT or end-to-end predictions), but the setting, "
        "and whatever was planned on it (TTFT or TPOT SLOs the EPP does not route on), is wrong.",
    ),
    c.CHECK_EPP_GENERATION: _Words(
        "The EPP is not the generation the settings name.",
        f"Pool {_POOL}'s EPP page is of another generation than predictions.epp_generation names. Shadow "
        "predictions ask the predictor with the named generation's features (words or tokens, pod role, "
        "in-flight counts), which are not the EPP's: their errors are sloscope's, not the predictor's.",
    ),
    c.CHECK_EPP_FAMILIES: _Words(
        "The EPP's page has none of the series sloscope reads.",
        f"Pool {_POOL} serves requests through its EPP, but the EPP's page has none of the families sloscope "
        "reads: an EPP upgrade renamed them, or the scrape URL points at another page. Every sloscope_epp_* "
        "series of the pool is missing, and auto-detection of the generation and streaming mode is blind.",
    ),
    c.CHECK_SPAN_REQUEST_ID: _Words(
        "Model-server requests arrive without a request id.",
        f"Fewer than 90 % of pool {_POOL}'s requests with a model-server span carried a request id (the gateway's "
        "x-request-id or the model server's gen_ai.request.id) over the last 10 minutes. Requests whose trace "
        "context broke can no longer be joined with their gateway spans by id: they lose SLO targets and routing.",
    ),
    c.CHECK_SPAN_TOKEN_COUNTS: _Words(
        "Model-server spans arrive without token counts.",
        f"Fewer than 90 % of pool {_POOL}'s answered requests carried a completion token count over the last 10 "
        "minutes: a model-server upgrade renamed gen_ai.usage.completion_tokens. TPOT and goodput cannot be "
        "computed for them; those SLOs silently lose their eligible requests.",
    ),
    c.CHECK_GATEWAY_SLO_HEADERS: _Words(
        "The gateway's spans no longer carry SLO headers.",
        f"Pool {_POOL}'s gateway spans carried SLO headers earlier, and none of the last 10 minutes' did. A "
        "gateway or EPP change stopped capturing them: requests fall back to their class's default targets, or "
        "to none, and the SLO series no longer judge what clients ask for.",
    ),
}


def upstream_alerts(thresholds: AlertThresholds) -> list[Rule]:
    """One alert per check, on ``sloscope_upstream_contract{check=...} == 0`` held ``contract_broken_for``."""
    rules = []
    for check in c.CONTRACT_CHECKS:
        words = _WORDS[check]
        contract = _selector(c.UPSTREAM_CONTRACT.exposed_name, {c.CHECK: check})
        rules.append(
            _alert(
                CONTRACT_ALERTS[check],
                f"{contract} == 0",
                severity=TICKET,
                hold=thresholds.contract_broken_for,
                summary=words.summary,
                description=f"{words.consequence} Check {check} has read broken for {thresholds.contract_broken_for}.",
            )
        )
    return rules
