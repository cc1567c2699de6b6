"""What every listener shares, below the receivers that listen: TLS with reloaded certificates, authentication,
the HTTP servers' own metrics and spans, and how a gRPC call is refused.

The OTLP receivers (Python and native fronts), the /metrics server and the service's wiring all stand on these;
none of them imports anything above the receivers (docs/architecture.md).
"""
