"""The "Prediction accuracy" dashboard: is the latency predictor the router trusts right?

A quantile predictor (p90 by default) is judged first by coverage, the share of requests whose actual latency
stayed under the prediction, against the quantile it claims (docs/predictions.md); the ratio actual / predicted
says by how much the misses miss, the pinball loss ranks predictors of one quantile. A mean predictor (the
llm-d router's default) feeds none of those: its row shows bias, MAE and RMSE from the error sums. The health
row says which objective each pool's predictor has, and whether a bad number comes from a stale, absent or
reset model. Ratios of counters use a
window the viewer picks (``$window``): coverage over a few minutes of sampled traffic is mostly noise.
"""

from __future__ import annotations

from typing import Any

from sloscope import conventions as c
from sloscope.columnar.buckets import RATIO_BUCKETS
from sloscope.generators.dashboards import common as d
from sloscope.generators.dashboards import variables as v
from sloscope.generators.dashboards.promql import LE_INF, increase, le, max_by, rate, sel, series, sum_by, var
from sloscope.generators.dashboards.signals import SIGNAL_PANELS
from sloscope.generators.rules.thresholds import DEFAULT_THRESHOLDS
from sloscope.slo.spec import SLOSpec

FILE_NAME = "prediction-accuracy.json"
WINDOW = "$window"
_WINDOWS = ("15m", "1h", "6h", "1d")
_FILTERS = (var(c.POOL), var(c.MODEL))
_POOL = (var(c.POOL),)
_PRED_BY = (c.POOL, c.SIGNAL, c.SOURCE)
_MISS_FACTORS = (1.25, 2.0)
_TOLERANCE = 0.05
_BIAS = DEFAULT_THRESHOLDS.bias_max_ratio  # where SloscopePredictorBiased fires
RELATIVE_BIAS = "Relative bias by pool, signal and source"
BIAS_AND_MAE = "Bias and MAE"
RMSE = "RMSE"
OFFLINE_MAE = "Offline against online MAE (mean predictors)"
_POOL_WIDE = " Not filtered by model where a series is the predictor's: one predictor serves the pool's every model."
MEAN_OBJECTIVE_PANELS = frozenset({RELATIVE_BIAS, BIAS_AND_MAE, RMSE, OFFLINE_MAE})
"""The panels that have data only for pools whose predictor predicts the mean."""


def dashboard(spec: SLOSpec) -> Any:
    """Coverage, the ratio distribution, pinball loss, per-model coverage and predictor health."""
    return d.build(
        title="Prediction accuracy",
        service=spec.service,
        file_name=FILE_NAME,
        description=(
            "How right the latency predictor behind prediction-based routing is: coverage against its quantile, "
            "actual / predicted, pinball loss, and the predictor's health. source=span: the router's own prediction "
            "read from a span; source=shadow: rebuilt by sloscope from the pod state as of the request's arrival."
        ),
        tags=["predictions"],
        variables=[
            v.datasource_variable(),
            # Every evaluated request's pool, so pools whose predictor predicts the mean are listed too.
            v.label_variable(c.POOL, c.REQUESTS, "Pool"),
            v.label_variable(c.MODEL, c.REQUESTS, "Model", narrowed_by=(c.POOL,)),
            v.interval_variable("window", "Window", _WINDOWS, "1h"),
            v.traces_variable(),
        ],
        panels=[*_coverage(), *_ratio(), *_by_model(), *_mean(), *_health()],
    )


def _coverage_of(by: tuple[str, ...], window: str = WINDOW) -> str:
    covered = sum_by(by, rate(series(c.PREDICTION_COVERED), _FILTERS, window))
    compared = sum_by(by, rate(series(c.PREDICTIONS), _FILTERS, window))
    return f"{covered} / {compared}"


def _summed(metric: c.MetricDef, by: tuple[str, ...]) -> str:
    return sum_by(by, rate(series(metric), _FILTERS, WINDOW))


def _error(by: tuple[str, ...], *, signed: bool) -> str:
    """The rate of actual - predicted (``signed``: underestimates minus overestimates) or of its absolute value
    (their sum). Both sums only grow, so rate() of each is right across sloscope restarts."""
    under, over = _summed(c.MEAN_PREDICTION_UNDERESTIMATE, by), _summed(c.MEAN_PREDICTION_OVERESTIMATE, by)
    return f"({under} {'-' if signed else '+'} {over})"


def _per_mean_prediction(numerator: str, by: tuple[str, ...] = _PRED_BY) -> str:
    """``numerator`` (a rate) over the rate of mean predictions, over $window: bias, MAE or mean squared error."""
    return f"{numerator} / {_summed(c.MEAN_PREDICTIONS, by)}"


def _mean() -> list[Any]:
    relative = f"{_error(_PRED_BY, signed=True)} / {_summed(c.MEAN_PREDICTION_PREDICTED, _PRED_BY)}"
    legend = "{{pool}} {{signal}} {{source}}"
    return [
        d.row("Mean predictions: bias, MAE, RMSE"),
        d.timeseries(
            RELATIVE_BIAS,
            'For predictors of the mean (sloscope_predictor_objective{objective="mean"}): mean of actual - '
            "predicted over the mean prediction, over $window. Positive: actual latency runs above the predictions "
            f"(optimistic routing); negative: below. SloscopePredictorBiased alerts beyond ±{_BIAS:.0%}.",
            [d.Query(relative, legend)],
            unit=d.PERCENT,
            width=8,
            thresholds=d.steps(d.BLUE, (-_BIAS, d.TRANSPARENT), (_BIAS, d.RED)),
            threshold_style="line+area",
        ),
        d.timeseries(
            BIAS_AND_MAE,
            "Bias (mean of actual - predicted) and MAE (mean of |actual - predicted|) in seconds over $window, "
            "from the sums of underestimates (actual above the prediction) and overestimates of mean predictions: "
            "bias = (under - over) / n, MAE = (under + over) / n.",
            [
                d.Query(_per_mean_prediction(_error(_PRED_BY, signed=True)), f"bias {legend}"),
                d.Query(_per_mean_prediction(_error(_PRED_BY, signed=False)), f"MAE {legend}"),
            ],
            unit=d.SECONDS,
            width=8,
        ),
        d.timeseries(
            RMSE,
            "Root mean squared error of mean predictions over $window, seconds. Well above the MAE: a few requests "
            "are off by a lot.",
            [d.Query(f"sqrt({_per_mean_prediction(_summed(c.MEAN_PREDICTION_SQUARED_ERROR, _PRED_BY))})", legend)],
            unit=d.SECONDS,
            width=8,
        ),
    ]


def _quantile() -> str:
    return max_by((c.POOL,), sel(series(c.PREDICTOR_QUANTILE), _POOL))


def _coverage() -> list[Any]:
    return [
        d.row("Coverage against the predictor's quantile"),
        d.timeseries(
            "Coverage by pool, signal and source",
            "Share of compared requests whose actual latency was at most the prediction, over $window "
            "(sloscope_prediction_covered_total / sloscope_predictions_total), with the quantile the predictor models "
            "drawn alongside (sloscope_predictor_quantile). A calibrated p90 predictor covers 90%: below means "
            "optimistic (the router sees room pods do not have, SLOs are missed), above means pessimistic (pods "
            "with room are refused)." + _POOL_WIDE,
            [
                d.Query(_coverage_of(_PRED_BY), "{{pool}} {{signal}} {{source}}"),
                d.Query(_quantile(), "{{pool}} quantile (target)"),
            ],
            unit=d.PERCENT,
            width=12,
            height=9,
            maximum=1,
        ),
        d.timeseries(
            "Coverage minus quantile",
            f"Coverage over $window minus the predictor's quantile. Red below -{_TOLERANCE:.0%}: optimistic; blue "
            f"above +{_TOLERANCE:.0%}: pessimistic. With n requests the coverage of a calibrated model still varies "
            "by about sqrt(q(1-q)/n): 3 points at n = 100, 1 point at n = 1000; see the count beside.",
            [
                d.Query(
                    f"{_coverage_of(_PRED_BY)} - on ({c.POOL}) group_left {_quantile()}",
                    "{{pool}} {{signal}} {{source}}",
                )
            ],
            unit=d.PERCENT,
            width=8,
            height=9,
            thresholds=d.steps(d.RED, (-_TOLERANCE, d.TRANSPARENT), (_TOLERANCE, d.BLUE)),
            threshold_style="line+area",
        ),
        d.stat(
            "Requests compared",
            "Requests compared with a prediction over $window, per signal and source: the sample size behind the "
            "coverage beside it.",
            [
                d.Query(
                    sum_by((c.SIGNAL, c.SOURCE), increase(series(c.PREDICTIONS), _FILTERS, WINDOW)),
                    "{{signal}} {{source}}",
                )
            ],
            unit=d.SHORT,
            thresholds=d.steps(d.BLUE),
            decimals=0,
            width=4,
            height=9,
            sparkline=False,
        ),
    ]


def _ratio() -> list[Any]:
    panels: list[Any] = [d.row("Actual / predicted")]
    for signal in SIGNAL_PANELS:
        name = signal.name
        buckets = rate(series(c.PREDICTION_RATIO, "_bucket"), (*_FILTERS, signal.matcher))
        panels.append(
            d.heatmap(
                f"{name} actual / predicted",
                f"Distribution of actual / predicted {name} per request (both sources), from the histogram buckets as "
                "stored: everything at or below 1 was covered, the rows above 1 show by how much the misses missed. "
                f"Exemplar marks carry the request's trace_id and link to its trace in the traces data source."
                f"{signal.note}",
                d.Query(sum_by(("le",), buckets), "{{le}}", exemplar=True, format="heatmap"),
                y_unit=d.NONE,
                cell_unit=d.REQUESTS_PER_SECOND,
                trace_links=True,
            )
        )
    bucket = series(c.PREDICTION_RATIO, "_bucket")
    total = sum_by((c.SIGNAL,), rate(bucket, (*_FILTERS, LE_INF), WINDOW))
    panels += [
        d.timeseries(
            "Ratio percentiles",
            "p50 and p90 of actual / predicted over $window per signal. For a calibrated p90 predictor the p90 of the "
            "ratio is 1 (dashed line); the p50 sits below 1 by the spread of the latency it predicts.",
            [
                d.Query(
                    f"histogram_quantile({q}, {sum_by((c.SIGNAL, 'le'), rate(bucket, _FILTERS, WINDOW))})",
                    f"p{round(q * 100)} {{{{signal}}}}",
                )
                for q in (0.5, 0.9)
            ],
            unit=d.NONE,
            thresholds=d.steps(d.GREEN, (1, d.RED)),
            threshold_style="dashed",
        ),
        d.timeseries(
            "Misses by size",
            "Share of compared requests over $window whose actual latency exceeded the prediction by more than "
            f"{' and '.join(f'{f}x' for f in _MISS_FACTORS)}, per signal. A predictor can cover 90% and still miss "
            "the other 10% by a factor of three.",
            [
                d.Query(
                    f"1 - {sum_by((c.SIGNAL,), rate(bucket, (*_FILTERS, le(f, RATIO_BUCKETS)), WINDOW))} / {total}",
                    f"{{{{signal}}}} > {f}x",
                )
                for f in _MISS_FACTORS
            ],
            unit=d.PERCENT,
        ),
        d.timeseries(
            "Mean pinball loss by pool, signal and source",
            "Mean pinball (quantile) loss per compared request over $window, in seconds: q·(actual - predicted) when "
            "the prediction was too low, (1 - q)·(predicted - actual) when too high. Ranks predictors of the same "
            "quantile; lower is better.",
            [
                d.Query(
                    f"{sum_by(_PRED_BY, rate(series(c.PREDICTION_PINBALL_LOSS), _FILTERS, WINDOW))} / "
                    f"{sum_by(_PRED_BY, rate(series(c.PREDICTIONS), _FILTERS, WINDOW))}",
                    "{{pool}} {{signal}} {{source}}",
                )
            ],
            unit=d.SECONDS,
            width=24,
        ),
    ]
    return panels


_NO_POD = (
    "Prediction series carry model and pool but no pod label (pod stays off histogram-sized families to bound "
    "their cardinality), so per-model is the finest split; per-pod behaviour is on the Pod headroom dashboard."
)


def _by_model() -> list[Any]:
    by = (c.MODEL, c.SIGNAL, c.SOURCE)
    return [
        d.row("Coverage by model"),
        d.timeseries(
            "Coverage by model",
            f"Coverage over $window per model and signal (both sources). {_NO_POD}",
            [d.Query(_coverage_of((c.MODEL, c.SIGNAL)), "{{model}} {{signal}}")],
            unit=d.PERCENT,
            maximum=1,
        ),
        d.table(
            "Coverage by model and source",
            f"Coverage and the number of compared requests over $window per model, signal and source, at the end "
            f"of the time range. {_NO_POD}",
            [
                d.Query(_coverage_of(by), instant=True, format="table"),
                d.Query(
                    sum_by(by, increase(series(c.PREDICTIONS), _FILTERS, WINDOW)),
                    instant=True,
                    format="table",
                ),
            ],
            unit=d.SHORT,
            decimals=3,
            transformations=d.merged_columns("coverage", "compared"),
        ),
    ]


def _health() -> list[Any]:
    pool_compared = rate(series(c.PREDICTIONS), _FILTERS, WINDOW)
    pool_covered = rate(series(c.PREDICTION_COVERED), _FILTERS, WINDOW)
    by = (c.POOL, c.SIGNAL)
    return [
        d.row("Predictor health"),
        d.stat(
            "Objective",
            "What each pool's predictor predicts (sloscope_predictor_objective == 1): quantile (judged by coverage) "
            "or mean (judged by bias, MAE, RMSE)." + _POOL_WIDE,
            [
                d.Query(
                    f"max by ({c.POOL}, {c.OBJECTIVE}) ({sel(series(c.PREDICTOR_OBJECTIVE), _POOL)}) == 1",
                    "{{pool}} {{objective}}",
                )
            ],
            unit=d.NONE,
            thresholds=d.steps(d.BLUE),
            width=6,
            height=8,
            sparkline=False,
        ),
        d.stat(
            "Trained",
            "1 (trained) or 0 (reset): a model reset to its default predicts a constant while its servers answer "
            "ready (no training samples, default-model markers, or the same prediction for two very different probe "
            "requests)." + _POOL_WIDE,
            [d.Query(max_by(by, sel(series(c.PREDICTOR_TRAINED), _POOL)), "{{pool}} {{signal}}")],
            unit=d.NONE,
            thresholds=d.steps(d.RED, (1, d.GREEN)),
            width=6,
            height=8,
            sparkline=False,
        ),
        d.timeseries(
            OFFLINE_MAE,
            "MAE and RMSE a mean-objective training server measured on its held-out samples (offline) against the "
            "MAE of routed requests over $window (online). Online well above offline: live traffic differs from "
            "what the predictor learnt from." + _POOL_WIDE,
            [
                d.Query(
                    max_by(by, sel(series(c.PREDICTOR_MAE_OFFLINE_SECONDS), _POOL)), "{{pool}} {{signal}} MAE offline"
                ),
                d.Query(
                    max_by(by, sel(series(c.PREDICTOR_RMSE_OFFLINE_SECONDS), _POOL)), "{{pool}} {{signal}} RMSE offline"
                ),
                d.Query(_per_mean_prediction(_error(by, signed=False), by), "{{pool}} {{signal}} MAE online"),
            ],
            unit=d.SECONDS,
            width=12,
        ),
        d.stat(
            "Predictor servers",
            "1 (up) when a training or prediction server answers ready (/readyz, and /status is_ready for prediction "
            "servers), 0 (down) otherwise. A training server is not ready until it has models." + _POOL_WIDE,
            [d.Query(max_by((c.POOL, c.ROLE, c.SERVER), sel(series(c.PREDICTOR_UP), _POOL)), "{{role}} {{server}}")],
            unit=d.NONE,
            thresholds=d.steps(d.RED, (1, d.GREEN)),
            mappings=d.up_down(),
            width=8,
            height=8,
            sparkline=False,
        ),
        d.timeseries(
            "Model age",
            "Seconds since the training server last wrote each signal's model. It retrains continuously: an age that "
            "keeps growing means training stopped, and predictions come from an ever older model." + _POOL_WIDE,
            [d.Query(max_by(by, sel(series(c.PREDICTOR_MODEL_AGE_SECONDS), _POOL)), "{{pool}} {{signal}}")],
            unit=d.SECONDS,
            width=8,
        ),
        d.timeseries(
            "Training samples",
            "Samples the training server holds to fit each signal's model. It should grow with traffic until its "
            "buckets fill; a flat line while requests flow means the EPP stopped sending training data." + _POOL_WIDE,
            [d.Query(max_by(by, sel(series(c.PREDICTOR_TRAINING_SAMPLES), _POOL)), "{{pool}} {{signal}}")],
            unit=d.SHORT,
            width=8,
        ),
        d.timeseries(
            "Offline against online coverage",
            "Coverage the training server measured on its held-out samples (offline) against the coverage of routed "
            "requests over $window (online), with the target quantile. Online below offline: live traffic differs "
            "from what the predictor learnt from." + _POOL_WIDE,
            [
                d.Query(
                    max_by(by, sel(series(c.PREDICTOR_COVERAGE_OFFLINE_RATIO), _POOL)),
                    "{{pool}} {{signal}} offline",
                ),
                d.Query(f"{sum_by(by, pool_covered)} / {sum_by(by, pool_compared)}", "{{pool}} {{signal}} online"),
                d.Query(_quantile(), "{{pool}} quantile (target)"),
            ],
            unit=d.PERCENT,
            width=8,
            maximum=1,
        ),
        d.timeseries(
            "Predictor calls by purpose and result",
            "Calls sloscope made to the pools' prediction servers per second: shadow (per-request predictions) and "
            "headroom (live per-pod headroom), by result. rejected: 422, the server refused the features; "
            "circuit_open: every server's breaker was open, no call was made." + _POOL_WIDE,
            [
                d.Query(
                    sum_by((c.PURPOSE, c.RESULT), rate(series(c.PREDICTOR_REQUESTS), _POOL)), "{{purpose}} {{result}}"
                )
            ],
            unit=d.REQUESTS_PER_SECOND,
            stacked=True,
        ),
        d.timeseries(
            "Shadow predictions skipped by reason",
            "Completed requests per second that got no shadow prediction, by reason: sampled_out, rate_limited, "
            "no_predictor, no_pod_state (no fresh sample of the pod before the arrival), no_features, queue_full, "
            "failed (see the predictor calls beside)." + _POOL_WIDE,
            [d.Query(sum_by((c.REASON,), rate(series(c.SHADOW_SKIPPED), _POOL)), "{{reason}}")],
            unit=d.REQUESTS_PER_SECOND,
            stacked=True,
        ),
    ]
