"""Prompt rendering and input handling, property-based: arbitrary Unicode,
braces, control characters and empty texts are substituted verbatim, and no
template field can reach an attribute or an index. Pure functions: no engine."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_label_clf.fitting.inputs import as_records
from llm_label_clf.reading.label_tokens import in_context_verbalizer
from llm_label_clf.reading.prompts import PromptTemplate, join_labels

any_text = st.text(st.characters(), max_size=200)


@given(prefix=any_text, text=any_text, suffix=any_text)
def test_text_is_substituted_verbatim(prefix, text, suffix):
    escape = lambda s: s.replace("{", "{{").replace("}", "}}")  # noqa: E731 - literal template text
    template = PromptTemplate.parse(f"{escape(prefix)}{{text}}{escape(suffix)}")
    assert template.fields == ["text"]
    assert template.render({"text": text}) == prefix + text + suffix
    assert template.suffix == suffix


@given(texts=st.lists(any_text, max_size=30))
def test_records_keep_every_text_in_order(texts):
    assert [r["text"] for r in as_records(texts)] == texts


@given(field=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True), extra=st.sampled_from(
    [".__class__", "[0]", ".upper", "!r", "!s", ":>10", "[__globals__]"]
))
def test_fields_with_attributes_indexes_or_formats_are_rejected(field, extra):
    with pytest.raises(ValueError, match="not allowed"):
        PromptTemplate.parse(f"Q: {{{field}{extra}}}\nA:")


@pytest.mark.parametrize("template", ["{text", "text}", "{text}}", "{"])
def test_malformed_templates_say_how_to_write_braces(template):
    with pytest.raises(ValueError, match="literal braces"):
        PromptTemplate.parse(template)


@given(label=st.text(min_size=1, max_size=20), end=any_text)
def test_verbalizer_gets_a_leading_space_only_after_a_non_space_end(label, end):
    word = in_context_verbalizer(label, end, chat=False)
    if end and not end[-1].isspace() and not label[0].isspace():
        assert word == " " + label
    else:
        assert word == label
    assert in_context_verbalizer(label, end, chat=True) == label


@given(labels=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=6))
def test_listed_labels_name_each_label_once_in_order(labels):
    listed = join_labels(labels)
    position = 0
    for label in labels:
        found = listed.find(label, position)
        assert found >= position
        position = found + len(label)
