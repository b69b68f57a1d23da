"""kvfabric.weights between processes: a sender and three receivers (a chain
on one host), every tensor checked by its receiver against the sender's,
two versions in a row, over tcp and shm."""

from contextlib import contextmanager

import pytest
from json_process import JsonProcess


@contextmanager
def sync_members(count: int, spec: dict):
    """`count` weight-sync members (weights_rank.py), closed at the end."""
    members = [JsonProcess("weights_rank.py", spec, what="weight-sync member") for _ in range(count)]
    try:
        yield members
    finally:
        for m in members:
            m.close()


def connect(members: list) -> None:
    """Connects every member, the first sending; on one host they form a chain."""
    descriptions = [m.info["description"] for m in members]
    for i, m in enumerate(members):
        m.ask(op="connect", members=descriptions, me=i)
    assert [m.answer() for m in members] == [{"parents": list(range(-1, len(members) - 1))}] * len(members)


def sync_version(members: list, version: int) -> None:
    """Member 0 sends `version`; every other one receives and checks all 44 tensors."""
    members[0].ask(op="send", version=version)
    for m in members[1:]:
        m.ask(op="receive", version=version)
    assert members[0].answer() == {"sent": 44}
    assert [m.answer() for m in members[1:]] == [{"received": 44, "counted": True}] * (len(members) - 1)


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_every_receiver_gets_every_tensor_of_each_version(protocol):
    with sync_members(4, {"protocol": protocol}) as members:
        connect(members)
        for version in (1, 2):
            sync_version(members, version)


def test_a_version_that_failed_half_way_is_sent_again_after_a_new_connect():
    """The sender's tensors stop after a few buckets (a trainer that failed
    mid-step): every receiver ends with an error naming what it waited for,
    and the next send or receive is refused until a new connect; after it,
    as each step of an RL framework makes, the same version goes through
    whole, then the next one."""
    with sync_members(3, {"protocol": "tcp", "timeout": 2}) as members:
        connect(members)
        members[0].ask(op="send_part", version=7, tensors=30)
        for m in members[1:]:
            m.ask(op="receive", version=7)
        assert members[0].answer() == {"failed": "no tensor after 30"}
        for m in members[1:]:
            error = m.answer()["error"]
            assert "TransferTimeoutError" in error and "bucket" in error, error
        # Without a new connect, the failed version's leftovers could pass for the next one's: refused.
        members[0].ask(op="send", version=7)
        members[1].ask(op="receive", version=7)
        for m in members[:2]:
            error = m.answer()["error"]
            assert "InvalidArgumentError" in error and "did not complete" in error, error
        for version in (7, 8):
            connect(members)
            sync_version(members, version)


def test_members_with_other_options_are_refused_and_a_closed_sync_says_so():
    import kvfabric
    from kvfabric.weights import WeightSync

    with kvfabric.Engine(protocol="tcp") as a, kvfabric.Engine(protocol="tcp") as b:
        sender = WeightSync(a, bucket_bytes=1 << 20)
        other = WeightSync(b, bucket_bytes=2 << 20)
        with pytest.raises(kvfabric.InvalidArgumentError, match="member 1 .*give every member the same options"):
            sender.connect([sender.describe(), other.describe()], 0)
        with pytest.raises(kvfabric.InvalidArgumentError, match="not one WeightSync::Describe gave"):
            sender.connect([sender.describe(), "{}"], 0)
        other.close()
        other.close()
        with pytest.raises(kvfabric.ClosedError):
            other.describe()
        sender.close()
