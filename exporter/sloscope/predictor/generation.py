"""Which EPP's routing-time prediction call a shadow prediction reproduces.

Three generations of the endpoint picker call the latency predictor, all with ``POST
/predict/bulk/strict`` and ``num_tokens_generated`` 1, and differ in what they send:

- **gie-2025**, the late-2025 Gateway API Inference Extension EPP (``slo_aware_router/
  latencypredictor_helper.go:334-348`` at gateway-api-inference-extension 0f0dff68): the six
  original features, ``input_token_length`` = the prompt's whitespace word count
  (``len(strings.Fields(prompt))``), ``num_request_running`` = the pod's scraped running count.
- **gie-v1.5**, GIE v1.5.0's EPP, its last (``pkg/epp/framework/plugins/scheduling/scorer/predictedlatency/
  latencypredictor_helper.go:39-60,353-396`` and ``sidecars/latencypredictorasync/types.go:183-193`` at
  df9f8909fe06): the same words and scraped counts, plus ``pod_type`` (the pod's value of the plugin's
  ``endpointRoleLabel``, omitted when empty) and ``prefill_tokens_in_flight`` / ``decode_tokens_in_flight``,
  without the encoder sizes. Its prefill tokens in flight are a counter inside the plugin (``prediction.go:55-72``,
  ``requestcontrol_hooks.go:190-200``) that no page publishes: sloscope sends 0, as for an idle pod.
- **llm-d**, the llm-d-router EPP (``predictedlatency/prediction.go:60-88`` and ``training.go:33-59,
  208-237`` at llm-d-router ebab6879): ``input_token_length`` = the tokenized prompt's token count,
  ``num_request_running`` and ``prefill_tokens_in_flight`` = its in-flight load producer's counts for
  the endpoint (the pod's scraped running count and 0 when the producer has none, ``plugin.go:222-227``),
  ``pod_type`` = the pod's value of the plugin's ``endpointRoleLabel``, ``decode_tokens_in_flight`` and
  the encoder sizes 0.

``auto`` tells them apart by what the pool shows: its EPP page (an llm-d EPP publishes ``llm_d_epp_*`` families
from start-up; GIE v1.5.0's times its ``predicted-latency-producer``, or names the pod of its scheduling attempts),
else its prediction servers' ``/status`` (from the first health poll) and answers (the llm-d and GIE v1.5.0
predictors' carry ``objective_type``, the late-2025 one's do not: one with it is taken for llm-d's, since without
a page nothing tells the two apart); with neither known yet it asks as gie-2025.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["GIE_2025", "GIE_V15", "LLM_D", "Generation", "resolve"]

Generation = Literal["gie-2025", "gie-v1.5", "llm-d"]
GIE_2025: Generation = "gie-2025"
GIE_V15: Generation = "gie-v1.5"
LLM_D: Generation = "llm-d"


def resolve(setting: str, page: Generation | None, predictor_speaks_objective: bool | None) -> Generation:
    """The generation for a pool: the setting unless ``auto``, else what its EPP page, then its predictor, shows."""
    if setting in (LLM_D, GIE_V15, GIE_2025):
        return setting
    if page is not None:
        return page
    return LLM_D if predictor_speaks_objective else GIE_2025
