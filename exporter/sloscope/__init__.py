"""sloscope: SLO observability for prediction-based routing of LLM inference.

The public surface is the command line (``sloscope``), the runtime settings schema
(:mod:`sloscope.config`) and the SLO spec schema (:mod:`sloscope.slo.spec`).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
