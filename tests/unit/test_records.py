"""`record`: value semantics of a frozen dataclass, no attributes beyond its fields, built in C."""

from __future__ import annotations

from dataclasses import field

import pytest

from gateway.records import record


@record
class Call:
    """A call."""

    model: str
    attempts: int = 1
    tags: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def first_attempt(self) -> bool:
        return self.attempts == 1

    def again(self) -> Call:
        return Call(self.model, self.attempts + 1)


@record
class Route:
    model: str
    region: str | None = None


def test_records_are_equal_and_hash_by_value() -> None:
    assert Call("chat") == Call("chat", 1)
    assert Call("chat") != Call("chat", 2)
    assert hash(Route("chat")) == hash(Route("chat", None))
    assert len({Route("chat", "eu"), Route("chat", "eu"), Route("chat")}) == 2
    with pytest.raises(TypeError):
        hash(Call("chat"))  # a list field is unhashable, as in a dataclass
    assert repr(Call("chat")) == "Call(model='chat', attempts=1, tags=(), notes=[])"


def test_fields_take_defaults_keywords_and_factories() -> None:
    first, second = Call(model="chat"), Call("chat")
    assert first.tags == () and first.notes == []
    assert first.notes is not second.notes  # a fresh list each time, as default_factory says
    with pytest.raises(TypeError):
        Call()  # type: ignore[call-arg]


def test_a_record_keeps_its_methods_properties_and_names() -> None:
    call = Call("chat")
    assert call.first_attempt and not call.again().first_attempt
    assert Call.__name__ == "Call" and Call.__qualname__ == "Call" and Call.__module__ == __name__
    assert Call.__doc__ == "A call."


def test_a_record_is_frozen_and_has_no_other_attributes() -> None:
    call = Call("chat")
    assert not hasattr(call, "__dict__")
    with pytest.raises(AttributeError):
        call.model = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        call.region = "eu"  # type: ignore[attr-defined]


def test_building_a_record_runs_no_python_code() -> None:
    """A dataclass's __init__ is Python code, interpreted on every request; a record's is C."""
    assert not hasattr(Call.__init__, "__code__")
