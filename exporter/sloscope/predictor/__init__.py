"""The latency predictor as sloscope sees it: asking its prediction servers, watching its health.

``features`` holds the request and answer shapes of the prediction API, ``client`` the batched,
round-robin caller with a circuit breaker per server (``breaker``), ``health`` the poller of the
training and prediction servers' health endpoints.
"""
