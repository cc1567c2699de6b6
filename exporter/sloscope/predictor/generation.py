"""Which EPP's routing-time prediction call a shadow prediction reproduces.

Two generations of the endpoint picker call the latency predictor, both with ``POST
/predict/bulk/strict`` and ``num_tokens_generated`` 1, and differ in what they send:

- **gie-2025**, the late-2025 Gateway API Inference Extension EPP (``slo_aware_router/
  latencypredictor_helper.go:334-348`` at gateway-api-inference-extension 0f0dff68): the six
  original features, ``input_token_length`` = the prompt's whitespace word count
  (``len(strings.Fields(prompt))``), ``num_request_running`` = the pod's scraped running count.
- **llm-d**, the llm-d-router EPP (``predictedlatency/prediction.go:60-88`` and ``training.go:33-59,
  208-237`` at llm-d-router ebab6879): ``input_token_length`` = the tokenized prompt's token count,
  ``num_request_running`` and ``prefill_tokens_in_flight`` = its in-flight load producer's counts for
  the endpoint (the pod's scraped running count and 0 when the producer has none, ``plugin.go:222-227``),
  ``pod_type`` = the pod's value of the plugin's ``endpointRoleLabel``, ``decode_tokens_in_flight`` and
  the encoder sizes 0.

``auto`` tells them apart by what the pool shows: its EPP page (an llm-d EPP publishes
``llm_d_epp_*`` families from start-up), else its prediction servers' answers (the llm-d predictor's
carry ``objective_type``, the GIE one's do not); with neither known yet it asks as gie-2025.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["GIE_2025", "LLM_D", "Generation", "resolve"]

Generation = Literal["gie-2025", "llm-d"]
GIE_2025: Generation = "gie-2025"
LLM_D: Generation = "llm-d"


def resolve(setting: str, epp_is_llm_d: bool | None, predictor_speaks_objective: bool | None) -> Generation:
    """The generation for a pool: the setting unless ``auto``, else what its EPP page, then its predictor, shows."""
    if setting == LLM_D:
        return LLM_D
    if setting == GIE_2025:
        return GIE_2025
    hint = epp_is_llm_d if epp_is_llm_d is not None else predictor_speaks_objective
    return LLM_D if hint else GIE_2025
