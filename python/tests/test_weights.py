"""kvfabric.weights between processes: a sender and three receivers (a chain
on one host), every tensor checked by its receiver against the sender's,
two versions in a row, over tcp and shm."""

import pytest
from json_process import JsonProcess


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_every_receiver_gets_every_tensor_of_each_version(protocol):
    members = [JsonProcess("weights_rank.py", {"protocol": protocol}, what="weight-sync member") for _ in range(4)]
    try:
        descriptions = [m.info["description"] for m in members]
        for i, m in enumerate(members):
            m.ask(op="connect", members=descriptions, me=i)
        assert [m.answer() for m in members] == [{"parents": [-1, 0, 1, 2]}] * 4
        for version in (1, 2):
            members[0].ask(op="send", version=version)
            for m in members[1:]:
                m.ask(op="receive", version=version)
            assert members[0].answer() == {"sent": 44}
            assert [m.answer() for m in members[1:]] == [{"received": 44}] * 3
    finally:
        for m in members:
            m.close()
