"""Inter-token gaps from streamed chunks (clients/openai_load.py): per token, as vLLM's TPOT counts them."""

from __future__ import annotations

import pytest

from glm_operator.clients.openai_load import _token_gaps, _tokens_in


def test_a_chunk_counts_its_token_ids_or_one_for_text() -> None:
    assert _tokens_in({"choices": [{"token_ids": [5, 6, 7], "text": ""}]}) == 3
    assert _tokens_in({"choices": [{"delta": {"content": "hi"}}]}) == 1
    assert _tokens_in({"choices": [{"delta": {"reasoning_content": "hm"}}]}) == 1
    assert _tokens_in({"choices": [{"delta": {}}]}) == 0
    assert _tokens_in({"choices": []}) == 0


def test_a_speculative_step_of_three_tokens_is_three_gaps_of_a_third() -> None:
    # one token, then a step that accepted two drafts (three tokens) 30 ms later, then one token 10 ms later
    gaps = _token_gaps([(0.0, 1), (0.030, 3), (0.040, 1)])
    assert gaps == pytest.approx((0.010, 0.010, 0.010, 0.010))


def test_one_token_a_chunk_keeps_the_plain_gaps() -> None:
    assert _token_gaps([(0.0, 1), (0.02, 1), (0.05, 1)]) == pytest.approx((0.02, 0.03))
    assert _token_gaps([(0.0, 4)]) == ()
