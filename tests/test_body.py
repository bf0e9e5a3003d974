"""A request body's attachments are spliced into its JSON as they are: the same bytes."""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from worker.adapters.body import Verbatim, encode_body

BASE64 = st.binary(max_size=300).map(lambda raw: base64.b64encode(raw).decode())
JSON_TEXT = st.text(max_size=30)  # NUL and quotes included: escaped as ever
LEAVES = st.one_of(
    JSON_TEXT,
    st.integers(),
    st.booleans(),
    st.none(),
    BASE64.map(Verbatim),
    BASE64.map(lambda data: Verbatim(f"data:image/png;base64,{data}")),
)
BODIES = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(JSON_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)


@given(BODIES)
def test_a_spliced_body_is_the_json_of_the_same_body(body: Any) -> None:
    assert encode_body(body) == json.dumps(body, ensure_ascii=False).encode()
    assert json.loads(encode_body(body)) == body


def test_a_body_without_attachments_is_not_looked_through() -> None:
    body = {"messages": [{"content": 'hi \u0000 "there"'}], "n": 1}
    assert encode_body(body, spliced=False) == encode_body(body)
