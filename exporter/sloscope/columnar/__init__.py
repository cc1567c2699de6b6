"""The ground floor of the pipeline: what every stage reads and writes, importing nothing above it.

The columnar batch's Arrow helpers (:mod:`.arrow_arrays`), grouping rows by label values (:mod:`.columns`),
label admission under the cardinality caps (:mod:`.cardinality`) and the histograms' bucket boundaries
(:mod:`.buckets`). The SLO maths, the processors and the publishers all stand on these, so none of them has
to reach sideways or up for them (docs/architecture.md).
"""
