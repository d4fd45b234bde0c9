"""The ``spec_decode`` group's shape: speculative decoding (``sim.deploy.speculation`` builds
it).

A drafter proposes ``num_draft_tokens`` (K) tokens for each decoding request; the target verifies
them in its next step and keeps the accepted prefix plus one token of its own. Off by default
(K = 0): every other key is then read by nobody, whatever it holds.

Here are only the rules one value must keep. What needs K and another key at once (a per-position
list of K fractions, a drafter named for ``method=draft_model``) or the catalog (the draft model's
vocabulary and size) is checked where it is built, ``sim.deploy.speculation``, and only when
K > 0.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from sim.config.validation import Fraction, Int, NonNegative, StrictModel, Text

MAX_DRAFT_TOKENS = 16
"""The most drafts per step: published setups verify 1 to 8 (DeepSeek-V3's MTP 1, EAGLE-2's
chains 4 to 6, Leviathan et al. up to 10); past 16 even a 0.9 acceptance adds under 0.2 expected
tokens per step while every decode step grows by another query token per request."""

METHODS = ("draft_model", "mtp", "ngram")


class SpecDecodeConfig(StrictModel):
    """``configs/spec_decode/default.yaml`` says what each key means and why its default."""

    section: ClassVar[str] = "spec_decode"

    num_draft_tokens: Annotated[Int, Field(ge=0, le=MAX_DRAFT_TOKENS)] = 0
    acceptance_rate: Fraction | list[Fraction] = 0.8
    method: Literal["draft_model", "mtp", "ngram"] = "mtp"
    draft_model: Text | None = None  # a name from configs/model/ (method=draft_model)
    draft_cost: NonNegative | None = None  # a draft token's cost / the target's decode step

    @property
    def enabled(self) -> bool:
        return self.num_draft_tokens > 0
