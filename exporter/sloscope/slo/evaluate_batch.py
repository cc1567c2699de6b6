"""The SLO maths of :mod:`sloscope.slo.evaluate`, over a whole batch of joined requests at once.

Same definitions, same verdicts, row for row (the unit tests compare every field with :func:`evaluate`):
each rule there is a boolean mask here, computed with numpy over the batch's columns. Missing values are
NaN in the arrays (a null column entry) and so are missing results; a NaN or infinite input is told apart
from a missing one only where :func:`evaluate` tells them apart (``server_ttft_seconds`` falls back to
``ttft_seconds`` when null, not when NaN). Float results are computed with the same IEEE operations in the
same order, so they are bit-identical, not merely close.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sloscope import conventions as c
from sloscope.columnar.batch import Batch
from sloscope.columnar.columns import Codes, Floats, Mask
from sloscope.records import Evaluation, Verdict
from sloscope.slo.spec import ABORTS_BY_DEADLINE, ABORTS_NEVER, Range, SLOSpec

if TYPE_CHECKING:
    import pyarrow as pa

Strings = Callable[[str], tuple[Codes, list[str]]]
"""A batch's label column by name, as (codes, values in order of first appearance): :meth:`Batch.coded`."""

TARGET_SOURCES = ("request", "class_default", "none")  # target_source codes 0, 1, 2
_REQUEST, _CLASS_DEFAULT, _NONE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class VerdictColumns:
    """One SLO's verdicts, a row per request: :class:`~sloscope.records.Verdict` as four arrays."""

    eligible: Mask
    met: Mask
    actual: Floats  # seconds; NaN where the verdict has none
    target: Floats  # seconds; NaN where the verdict has none


@dataclass(frozen=True, slots=True)
class Verdicts:
    """What the evaluator concluded about every request of a batch: :class:`~sloscope.records.Evaluation`
    as columns. Classes and target sources are codes into :attr:`class_names` and :data:`TARGET_SOURCES`."""

    class_names: tuple[str, ...]
    slo_class: Codes
    ttft: VerdictColumns
    tpot: VerdictColumns
    goodput: VerdictColumns
    ttft_seconds: Floats  # NaN: None
    tpot_seconds: Floats
    target_source: Codes
    invalid: dict[str, Mask]  # per field of c.INVALID_FIELDS: reported invalid
    ttft_invalid_last: Mask  # TTFT was reported after the TPOT inputs (only the model server's own was unusable)

    def __len__(self) -> int:
        return len(self.slo_class)

    def verdict(self, slo: str) -> VerdictColumns:
        result: VerdictColumns = getattr(self, slo)
        return result

    def take(self, rows: Codes) -> Verdicts:
        """The verdicts of ``rows`` only, in that order (for the few requests that must become objects)."""
        return Verdicts(
            class_names=self.class_names,
            slo_class=self.slo_class[rows],
            ttft=_take(self.ttft, rows),
            tpot=_take(self.tpot, rows),
            goodput=_take(self.goodput, rows),
            ttft_seconds=self.ttft_seconds[rows],
            tpot_seconds=self.tpot_seconds[rows],
            target_source=self.target_source[rows],
            invalid={field: mask[rows] for field, mask in self.invalid.items()},
            ttft_invalid_last=self.ttft_invalid_last[rows],
        )

    def evaluations(self) -> list[Evaluation]:
        """The same conclusions as objects, for publishers that take one request at a time."""
        names, sources = self.class_names, TARGET_SOURCES
        columns: list[list[Any]] = [
            [names[i] for i in self.slo_class.tolist()],
            *(_verdict_objects(self.verdict(slo)) for slo in c.SLOS),
            _optional(self.ttft_seconds),
            _optional(self.tpot_seconds),
            [sources[i] for i in self.target_source.tolist()],
            self._invalid_fields(),
        ]
        return [Evaluation(*row) for row in zip(*columns, strict=True)]

    def to_record_batch(self) -> pa.RecordBatch:  # the records' evaluator part: Arrow only where records are kept
        """The verdicts as Arrow columns (``<slo>_eligible``, ``<slo>_met``, ``<slo>_actual_seconds``, ...), with
        each row's ``invalid_fields`` as a list in :func:`evaluate`'s order (the record store's column)."""
        import pyarrow as pa

        from sloscope.columnar import arrow_arrays

        arrays: dict[str, pa.Array] = {"slo_class": arrow_arrays.dictionary_array(self.slo_class, self.class_names)}
        for slo in c.SLOS:
            v = self.verdict(slo)
            arrays[f"{slo}_eligible"] = arrow_arrays.bool_array(v.eligible)
            arrays[f"{slo}_met"] = arrow_arrays.bool_array(v.met)
            arrays[f"{slo}_actual_seconds"] = arrow_arrays.float_array(v.actual, np.isnan(v.actual))
            arrays[f"{slo}_target_seconds"] = arrow_arrays.float_array(v.target, np.isnan(v.target))
        arrays["ttft_seconds"] = arrow_arrays.float_array(self.ttft_seconds, np.isnan(self.ttft_seconds))
        arrays["tpot_seconds"] = arrow_arrays.float_array(self.tpot_seconds, np.isnan(self.tpot_seconds))
        arrays["target_source"] = arrow_arrays.dictionary_array(self.target_source, TARGET_SOURCES)
        for field in c.INVALID_FIELDS:
            arrays[f"invalid_{field}"] = arrow_arrays.bool_array(self.invalid[field])
        arrays["invalid_fields"] = arrow_arrays.string_lists(self._invalid_fields())
        return pa.RecordBatch.from_arrays(list(arrays.values()), names=list(arrays))

    def _invalid_fields(self) -> list[tuple[str, ...]]:
        """Each row's ``invalid_fields`` in :func:`evaluate`'s order: TTFT first, unless it came last."""
        flags = np.stack([self.invalid[field] for field in c.INVALID_FIELDS], axis=1)
        out: list[tuple[str, ...]] = [()] * len(self)
        ttft, *tpot_inputs = c.INVALID_FIELDS
        last = self.ttft_invalid_last
        for row in np.flatnonzero(flags.any(axis=1)).tolist():
            fields = tuple(f for f, on in zip(tpot_inputs, flags[row, 1:].tolist(), strict=True) if on)
            out[row] = (*fields, ttft) if last[row] else ((ttft, *fields) if flags[row, 0] else fields)
        return out


def evaluate_batch(batch: Batch, spec: SLOSpec, strings: Strings | None = None) -> Verdicts:
    """Classify every request of ``batch`` (the columns of :mod:`~sloscope.processors.joined_batch`), resolve targets
    and judge each SLO, as :func:`~sloscope.slo.evaluate.evaluate` does one request. ``strings``: the batch's
    string columns, shared with the publishers."""
    n = len(batch)
    strings = strings if strings is not None else batch.coded
    slo_ttft, slo_tpot = batch.floats("slo_ttft_ms"), batch.floats("slo_tpot_ms")
    has_ttft, has_tpot = _valid_target(slo_ttft), _valid_target(slo_tpot)
    header_ttft, header_tpot = np.where(has_ttft, slo_ttft, np.nan), np.where(has_tpot, slo_tpot, np.nan)
    cls = _classify(spec, *models(strings), header_ttft, header_tpot)
    default_ttft = np.array([_ms(k.defaults.ttft_ms) for k in spec.classes] + [np.nan])
    default_tpot = np.array([_ms(k.defaults.tpot_ms) for k in spec.classes] + [np.nan])
    target_ttft = np.where(has_ttft, header_ttft, default_ttft[cls])  # NaN: no target
    target_tpot = np.where(has_tpot, header_tpot, default_tpot[cls])
    carries_ttft, carries_tpot = ~np.isnan(target_ttft), ~np.isnan(target_tpot)
    source = np.full(n, _NONE, dtype=np.intp)
    source[carries_ttft | carries_tpot] = _CLASS_DEFAULT
    source[has_ttft | has_tpot] = _REQUEST

    failed = failures(strings)[0]
    ok = ~failed

    raw_ttft = batch.floats("ttft_seconds")
    ttft_ok = valid_seconds_of(raw_ttft)
    ttft = np.where(ttft_ok, raw_ttft, np.nan)
    # TPOT subtracts TTFT from e2e: both from the model server's clock (its own TTFT, when it has one).
    server_ttft = np.where(batch.held("server_ttft_seconds"), batch.floats("server_ttft_seconds"), raw_ttft)
    server_ok = valid_seconds_of(server_ttft)
    e2e, tokens = batch.floats("e2e_seconds"), batch.floats("completion_tokens")
    e2e_ok, tokens_ok = valid_seconds_of(e2e), valid_tokens_of(tokens)
    with np.errstate(invalid="ignore"):
        backwards = e2e_ok & server_ok & tokens_ok & (tokens >= 2) & (e2e < server_ttft)
        computable = e2e_ok & server_ok & tokens_ok & (tokens >= 2) & ~backwards
    with np.errstate(invalid="ignore", divide="ignore"):
        computed = np.where(computable, (e2e - server_ttft) / (tokens - 1), np.nan)
    own_tpot = batch.floats("tpot_seconds")
    own = batch.held("tpot_seconds")
    tpot = np.where(own, np.where(valid_seconds_of(own_tpot), own_tpot, np.nan), computed)
    tpot_ok = ~np.isnan(tpot)

    needs_tpot_inputs = ok & carries_tpot & ~tpot_ok
    ttft_last = needs_tpot_inputs & ~server_ok & ttft_ok
    invalid = {
        c.FIELD_TTFT_SECONDS: ok & (~ttft_ok | ttft_last),
        c.FIELD_E2E_SECONDS: needs_tpot_inputs & (~e2e_ok | backwards),
        c.FIELD_COMPLETION_TOKENS: needs_tpot_inputs & ~tokens_ok,
    }

    ttft_verdict = _judge(ttft, target_ttft)
    tpot_verdict = _judge(tpot, target_tpot)
    with np.errstate(invalid="ignore"):
        single_token = tokens_ok & (tokens < 2)
    counted_tpot = carries_tpot & ~single_token  # a TPOT SLO does not apply to a one-token answer
    good_eligible = (
        (carries_ttft | counted_tpot)
        & (~carries_ttft | ttft_verdict.eligible)
        & (~counted_tpot | tpot_verdict.eligible)
    )
    good_met = good_eligible & (~carries_ttft | ttft_verdict.met) & (~counted_tpot | tpot_verdict.met)
    nothing = np.full(n, np.nan)
    goodput = VerdictColumns(good_eligible, good_met, nothing, nothing)

    # A failed request misses every SLO it carried (a client error: none), an aborted one by its class's rule;
    # its latency is no sample.
    ttft_missed, tpot_missed, good_missed = _failures_missed(
        batch, strings, spec, cls, target_ttft=target_ttft, target_tpot=target_tpot
    )
    ttft_verdict = _failed(ttft_verdict, failed, ttft_missed, ttft, target_ttft)
    tpot_verdict = _failed(tpot_verdict, failed, tpot_missed, nothing, target_tpot)
    goodput = _failed(goodput, failed, good_missed, nothing, nothing)
    return Verdicts(
        class_names=(*(k.name for k in spec.classes), spec.default_class),
        slo_class=cls,
        ttft=ttft_verdict,
        tpot=tpot_verdict,
        goodput=goodput,
        ttft_seconds=np.where(failed, np.nan, ttft),
        tpot_seconds=np.where(failed, np.nan, tpot),
        target_source=source,
        invalid=invalid,
        ttft_invalid_last=ttft_last,
    )


def failures(strings: Strings) -> tuple[Mask, Mask]:
    """The rows that failed, and those of them that failed by the client's fault (an invalid request)."""
    failed = strings("failure_reason")[0] >= 0
    return failed, _reason_is(strings, c.FAILURE_INVALID)


def _failures_missed(
    batch: Batch,
    strings: Strings,
    spec: SLOSpec,
    cls: Codes,
    *,
    target_ttft: Floats,
    target_tpot: Floats,
) -> tuple[Mask, Mask, Mask]:
    """The failed rows that miss TTFT, TPOT and goodput: every SLO they carried, an aborted one by its class's
    ``aborts`` rule (by default TTFT and goodput when the client left after the TTFT target, else nothing), a client
    error nothing."""
    failed, client_error = failures(strings)
    aborted = _reason_is(strings, c.FAILURE_ABORTED)
    carries_ttft, carries_tpot = ~np.isnan(target_ttft), ~np.isnan(target_tpot)
    never, by_deadline = (
        aborted & np.array([k.aborts == rule for k in spec.classes] + [default], dtype=bool)[cls]
        for rule, default in ((ABORTS_NEVER, False), (ABORTS_BY_DEADLINE, True))
    )
    with np.errstate(invalid="ignore"):
        waited_ms = _waited_ms(batch)
        late = carries_ttft & (np.isnan(waited_ms) | (waited_ms >= target_ttft))  # no first token by the target
    bad_event = failed & ~client_error & ~never
    return (
        bad_event & carries_ttft & (~by_deadline | late),
        bad_event & carries_tpot & ~by_deadline,
        bad_event & np.where(by_deadline, late, carries_ttft | carries_tpot),
    )


def _reason_is(strings: Strings, wanted: str) -> Mask:
    reason, reasons = strings("failure_reason")
    return np.array([r == wanted for r in reasons] + [False])[reason]


def _waited_ms(batch: Batch) -> Floats:
    """:func:`~sloscope.slo.evaluate.client_waited` of every row, in milliseconds (NaN: the spans do not say)."""
    arrival, call_arrival = (
        batch.ints("arrival_ns"),
        batch.ints("call_arrival_ns"),
    )
    end = batch.ints("end_ns")
    start = np.where(call_arrival != 0, call_arrival, arrival)
    known = (start > 0) & (end >= start)
    return np.where(known, (end - start) / 1e6, np.nan)


def models(strings: Strings) -> tuple[Codes, list[str]]:
    """``JoinedRequest.model or ""`` of every row (the target model, else the requested one), as codes into
    distinct names."""
    target, targets = strings("target_model")
    requested, requesteds = strings("requested_model")
    names = list(dict.fromkeys([*targets, *requesteds, ""]))
    index = {name: i for i, name in enumerate(names)}
    to_name = np.array([index[t] for t in targets] + [index[""]], dtype=np.intp)  # the last one: null
    from_requested = np.array([index[r] for r in requesteds] + [index[""]], dtype=np.intp)
    has_target = (target >= 0) & (to_name[target] != index[""])
    return np.where(has_target, to_name[target], from_requested[requested]), names


def _classify(spec: SLOSpec, codes: Codes, names: list[str], ttft_ms: Floats, tpot_ms: Floats) -> Codes:
    """Index of the first class of the spec whose match holds, or ``len(spec.classes)`` for the default class."""
    has_slo = ~np.isnan(ttft_ms) | ~np.isnan(tpot_ms)
    found = np.full(len(codes), len(spec.classes), dtype=np.intp)
    for index in reversed(range(len(spec.classes))):  # the earliest match is written last, so it wins
        match = spec.classes[index].match
        by_model = np.array([any(fnmatch.fnmatchcase(m, p) for p in match.models) for m in names], dtype=bool)
        holds = by_model[codes]
        if match.has_slo is not None:
            holds &= has_slo == match.has_slo
        holds &= _within(match.ttft_ms, ttft_ms) & _within(match.tpot_ms, tpot_ms)
        found[holds] = index
    return found


def _within(bounds: Range | None, values: Floats) -> Mask:
    """:meth:`Range.contains` over an array (NaN: no target, never contained)."""
    if bounds is None:
        return np.ones(len(values), dtype=bool)
    inside = ~np.isnan(values)
    with np.errstate(invalid="ignore"):
        if bounds.min is not None:
            inside &= values >= bounds.min
        if bounds.max is not None:
            inside &= values <= bounds.max
    return inside


def _judge(actual: Floats, target_ms: Floats) -> VerdictColumns:
    """:func:`~sloscope.slo.evaluate.judge` row by row: eligible with a valid target and a valid value."""
    valid_target = _valid_target(target_ms)
    target = np.where(valid_target, target_ms / 1000.0, np.nan)
    eligible = valid_target & ~np.isnan(actual)
    with np.errstate(invalid="ignore"):
        met = eligible & (actual <= target)
    return VerdictColumns(eligible, met, np.where(eligible, actual, np.nan), target)


def _failed(verdict: VerdictColumns, failed: Mask, missed: Mask, actual: Floats, target_ms: Floats) -> VerdictColumns:
    """Failed rows replaced: eligible and violated where ``missed`` (the SLO was carried), else not eligible."""
    with np.errstate(invalid="ignore"):
        target = target_ms / 1000.0
    return VerdictColumns(
        eligible=np.where(failed, missed, verdict.eligible),
        met=verdict.met & ~failed,
        actual=np.where(failed, np.where(missed, actual, np.nan), verdict.actual),
        target=np.where(failed, np.where(missed, target, np.nan), verdict.target),
    )


def valid_seconds_of(values: Floats) -> Mask:
    with np.errstate(invalid="ignore"):
        return np.isfinite(values) & (values >= 0)


def valid_tokens_of(values: Floats) -> Mask:
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore"):
        whole: Mask = np.trunc(np.where(finite, values, 0.0)) == values
        return finite & (values >= 0) & whole


def _valid_target(values_ms: Floats) -> Mask:
    with np.errstate(invalid="ignore"):
        return np.isfinite(values_ms) & (values_ms > 0)


def _ms(value: float | None) -> float:
    return np.nan if value is None else value


def _optional(values: Floats) -> list[float | None]:
    """The array as Python floats, NaN as None."""
    out = values.astype(object)
    out[np.isnan(values)] = None
    result: list[float | None] = out.tolist()
    return result


def _take(v: VerdictColumns, rows: Codes) -> VerdictColumns:
    return VerdictColumns(v.eligible[rows], v.met[rows], v.actual[rows], v.target[rows])


def _verdict_objects(v: VerdictColumns) -> list[Verdict]:
    columns = (v.eligible.tolist(), v.met.tolist(), _optional(v.actual), _optional(v.target))
    return [Verdict(*row) for row in zip(*columns, strict=True)]
