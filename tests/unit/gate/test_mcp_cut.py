"""A text the gate cuts says so at the cut, within the contract's bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from toolgate.gate._mcp import CUT_MARKER, cut_text

from tests.properties import DERANDOMIZED


class TestCutText:
    """Within the bound a text is unchanged; past it, it ends with a marker naming the counts."""

    def test_a_long_text_names_what_was_shown(self) -> None:
        text = "line\n" * 5000
        cut = cut_text(text, 1000)
        assert len(cut) == 1000
        shown, _, marker = cut.partition("\n[cut:")
        assert marker == f" the first {len(shown)} of 25000 characters]"
        assert CUT_MARKER.search(cut)
        assert text.startswith(cut.rpartition("\n[cut:")[0])

    @pytest.mark.parametrize("bound", [1, 2, 20])
    def test_a_bound_too_small_for_the_marker_ends_with_an_ellipsis(self, bound: int) -> None:
        cut = cut_text("y" * 100, bound)
        assert len(cut) == bound
        assert cut.endswith("\u2026")

    @settings(DERANDOMIZED, max_examples=200)
    @given(st.text(max_size=300), st.integers(min_value=1, max_value=400))
    def test_never_past_the_bound_and_untouched_within(self, text: str, bound: int) -> None:
        cut = cut_text(text, bound)
        assert len(cut) <= bound
        if len(text) <= bound:
            assert cut == text
        else:
            assert cut != text
