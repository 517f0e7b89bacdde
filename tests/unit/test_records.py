"""`record`: value semantics of a frozen dataclass, slots, and no per-field `object.__setattr__`."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gateway.records import record


@record
class Call:
    model: str
    attempts: int = 1


def test_records_are_equal_and_hash_by_value() -> None:
    assert Call("chat") == Call("chat", 1)
    assert hash(Call("chat")) == hash(Call("chat", 1))
    assert {Call("chat"), Call("chat"), Call("chat", 2)} == {Call("chat"), Call("chat", 2)}
    assert repr(Call("chat")) == "Call(model='chat', attempts=1)"


def test_a_record_has_slots_and_no_other_attributes() -> None:
    call = Call("chat")
    assert not hasattr(call, "__dict__")
    with pytest.raises(AttributeError):
        call.region = "eu"  # type: ignore[attr-defined]


def test_building_a_record_assigns_its_fields_directly() -> None:
    """A frozen dataclass's __init__ calls object.__setattr__ per field; a record's does not."""

    @dataclass(frozen=True, slots=True)
    class FrozenCall:
        model: str

    assert "__setattr__" in FrozenCall.__init__.__code__.co_names
    assert "__setattr__" not in Call.__init__.__code__.co_names
