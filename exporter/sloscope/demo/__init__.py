"""The embedded demo: a simulated fleet (model-server pods, a latency predictor, an EPP-like router and
clients) that talks to a real ``sloscope serve`` over the production protocols: OTLP spans from the
OpenTelemetry SDK, vLLM-compatible /metrics pages and the prediction-server HTTP API.

simulation (this package)                                        sloscope serve (a subprocess)
clients -> router --(POST /predict/bulk/strict)--> prediction server
             |  \\--(POST /add_training_data_bulk)-> training server  <-- health polls
             v
           pods (continuous batching) --/metrics-------------------> scrape loop
           spans (Envoy, EPP, P/D sidecars, vLLM) --OTLP----------> receivers

``--upstream llm-d`` (the default) simulates today's llm-d-router and vLLM 0.33 with agent clients
(agents.py, calls.py, llmd_spans.py); ``--upstream gie-2025`` the late-2025 gateway (workload.py, spans.py).
"""
