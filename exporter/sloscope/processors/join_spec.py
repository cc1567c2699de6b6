"""Everything the trace join reads, as one frozen object: its settings, the attribute mapping and the span
vocabulary.

Built once in Python and handed whole to the native join, which reads each part by its attribute name
(``native/src/join/py.rs`` ``JoinSpec``) and builds itself from it: the settings it reads, the mapping's keys per
field, the words of the upstreams' span shapes and the labels it writes. Nothing the join reads is typed again in
Rust, so a new engine's span shape is a change to the catalogue (:mod:`sloscope.upstream`) and to this spec's
parts alone (docs/architecture.md, "A model-server engine").
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from sloscope.attributes import Mapping
from sloscope.config import Join
from sloscope.upstream.vocabulary import VOCABULARY, SpanVocabulary

__all__ = ["JoinSpec"]


@dataclass(frozen=True)
class JoinSpec:
    join: Join
    mapping: Mapping
    vocabulary: SpanVocabulary = VOCABULARY

    @functools.cached_property
    def rules(self) -> dict[str, object]:
        """Per field, the attribute sources the mapping tries in order (:meth:`Mapping.rules`)."""
        return self.mapping.rules()

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        """The compiled ``join.request_id_pattern``."""
        return re.compile(self.join.request_id_pattern)
