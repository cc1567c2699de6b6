"""sloscope's latency-predictor stand-ins as the EPP's sidecars: one training and N prediction servers, a process.

The EPP reaches its predictor sidecars over HTTP (``TRAINING_SERVER_URL``, ``PREDICTION_SERVER_URL``:
gateway-api-inference-extension v1.5.0 ``sidecars/latencypredictorasync/types.go:93-104``); the fleet runs
:class:`sloscope.demo.predictor_servers.PredictorFleet` in a process of its own, as sidecars are. It prints one
line ``training=<url> prediction=<url>,<url>`` on standard error once every server listens, and stops on SIGTERM.

The models start as the real training server's of gateway-api-inference-extension v1.5.0 do: a default model for
each signal, ready at once (``latencypredictor/training_server.py:745-777,1345-1380``), of the objective that
server defaults to, the quantile (``LATENCY_OBJECTIVE_TYPE``, ``:113``).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from sloscope.demo.predictor_servers import PredictorFleet


async def run(args: argparse.Namespace) -> None:
    fleet = PredictorFleet(
        seed=args.seed,
        objective=args.objective,
        default_models=True,
        retrain_seconds=args.retrain_seconds,
        sync_seconds=args.sync_seconds,
        scale=args.scale,
        record=Path(args.record) if args.record else None,
    )
    ports = [int(port) for port in args.ports.split(",")] if args.ports else None
    await fleet.start(args.prediction_servers, ports)
    print(f"training={fleet.training_url} prediction={','.join(fleet.prediction_urls)}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await fleet.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--objective", choices=("mean", "quantile"), default="quantile")
    parser.add_argument("--prediction-servers", type=int, default=2)
    parser.add_argument("--retrain-seconds", type=float, default=2.0)
    parser.add_argument("--sync-seconds", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0, help="every prediction multiplied by it: a biased one")
    parser.add_argument("--ports", default="", help="the training server's port, then each prediction server's")
    parser.add_argument("--record", default="", help="a file to append each body the prediction servers receive to")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
