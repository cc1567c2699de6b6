"""What the upstream systems send, defined once: the span vocabulary both joins read (:mod:`.vocabulary`)."""
