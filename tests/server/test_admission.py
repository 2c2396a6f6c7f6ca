"""Who is let in, and in what order (server/gradstep/limits.py): the fair queue in front of the
sandbox's workers, and the client a request is charged to.

Each test attempts what a flood would do — many requests from one client, a wave of distinct
addresses from one network, a queue filled by one network — against the queue itself (an event
loop, no server), and shows it failing: others get the next turn, the wave is pushed out, nothing
waits past its time. tests/server/test_flood.py does it against a real server.
"""

from __future__ import annotations

import asyncio

import pytest
from gradstep.limits import FairQueue, Refused, client_key, network_of


def run(coro):
    return asyncio.run(coro)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


class Clients:
    """Requests entering a queue as tasks; ``order`` is who was let through, in order."""

    def __init__(self, queue: FairQueue):
        self.queue, self.order, self.tasks = queue, [], {}

    def send(self, client: str, name: str | None = None) -> str:
        name = name or f"{client}#{len(self.tasks)}"

        async def request():
            await self.queue.enter(client)
            self.order.append(name)

        self.tasks[name] = (client, asyncio.create_task(request()))
        return name

    def finish(self, name: str) -> None:
        self.queue.leave(self.tasks[name][0])

    def refused(self, name: str) -> bool:
        task = self.tasks[name][1]
        return task.done() and isinstance(task.exception(), Refused)


# -- the client and its network --------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b",
    [
        ("2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:fffe"),  # one /64: one subscriber
        ("2001:db8:1:2::1", "2001:DB8:1:2:0:0:0:77"),  # however it is written
        ("::ffff:198.51.100.7", "198.51.100.7"),  # IPv4-mapped
        ("fe80::1%eth0", "fe80::1"),
    ],
)
def test_addresses_of_one_subscriber_are_one_client(a, b):
    assert client_key(a) == client_key(b)


@pytest.mark.parametrize(
    "a, b",
    [("2001:db8:1:2::1", "2001:db8:1:3::1"), ("198.51.100.7", "198.51.100.8")],
)
def test_other_subscribers_are_other_clients(a, b):
    assert client_key(a) != client_key(b)


def test_a_client_is_in_its_24_or_48():
    assert (
        network_of(client_key("198.51.100.7"))
        == network_of(client_key("198.51.100.200"))
        == "198.51.100.0/24"
    )
    assert network_of(client_key("2001:db8:1:2::1")) == network_of(client_key("2001:db8:1:ff::1"))
    assert network_of(client_key("2001:db8:1:2::1")) != network_of(client_key("2001:db8:2:2::1"))
    assert network_of("?") == "?"


# -- the queue -------------------------------------------------------------------------------


def test_a_freed_place_goes_to_the_network_with_fewest_runs_not_to_the_oldest_waiter():
    async def main():
        q = FairQueue(capacity=20, serving=1, max_wait=60)
        c = Clients(q)
        first = c.send("10.0.0.1")
        await settle()
        wave = [c.send(f"10.0.0.{i}") for i in range(2, 8)]  # a wave of addresses from one /24
        await settle()
        late = c.send("198.51.100.1", "late")  # someone else, after all of them
        await settle()
        assert c.order == [first]
        c.finish(first)
        await settle()
        assert c.order == [first, late]  # the wave's network had its turn
        c.finish(late)
        await settle()
        assert c.order == [first, late, wave[0]]  # then the wave, oldest first
        for t in c.tasks.values():
            t[1].cancel()

    run(main())


def test_a_client_with_many_waiting_runs_gets_one_turn_per_round():
    async def main():
        q = FairQueue(capacity=20, serving=1, max_wait=60)
        c = Clients(q)
        held = c.send("203.0.113.1", "held")
        await settle()
        mine = [c.send("203.0.113.1") for _ in range(3)]
        await settle()
        theirs = [c.send("198.51.100.1"), c.send("192.0.2.1")]
        await settle()
        for name in [held, *theirs]:  # each done once it had its turn
            c.finish(name)
            await settle()
        assert c.order[:3] == [held, theirs[0], theirs[1]]  # not the flooder's three first
        assert mine[0] not in c.order[:3]
        for t in c.tasks.values():
            t[1].cancel()

    run(main())


def test_a_full_queue_pushes_out_the_newest_waiter_of_the_network_holding_most():
    async def main():
        q = FairQueue(capacity=4, serving=1, max_wait=60)
        c = Clients(q)
        wave = [c.send(f"10.0.0.{i}") for i in range(1, 5)]  # every place, one network
        await settle()
        late = c.send("198.51.100.1", "late")
        await settle()
        assert c.refused(wave[-1]) and not c.refused(late)  # the wave's newest gave its place
        assert q.inside == 4 and q.pushed_out == 1
        again = c.send("10.0.0.9")  # the wave cannot take it back
        await settle()
        assert c.refused(again) and q.refused == 1
        c.finish(wave[0])
        await settle()
        assert c.order == [wave[0], late]
        for t in c.tasks.values():
            t[1].cancel()

    run(main())


def test_a_newcomer_of_the_fullest_network_is_refused_not_pushing_its_own_out():
    async def main():
        q = FairQueue(capacity=2, serving=1, max_wait=60)
        c = Clients(q)
        a, b = c.send("10.0.0.1"), c.send("10.0.0.2")
        await settle()
        third = c.send("10.0.0.3")
        await settle()
        assert c.refused(third) and not c.refused(b) and c.order == [a]
        for t in c.tasks.values():
            t[1].cancel()

    run(main())


def test_nothing_waits_past_its_time():
    async def main():
        q = FairQueue(capacity=4, serving=1, max_wait=0.05)
        c = Clients(q)
        holder = c.send("10.0.0.1")
        await settle()
        waiter = c.send("198.51.100.1")
        while not c.tasks[waiter][1].done():  # the holder never leaves
            await asyncio.sleep(0.01)
        assert c.refused(waiter) and "longer than" in str(c.tasks[waiter][1].exception())
        assert q.inside == 1 and q.timed_out == 1
        c.finish(holder)
        assert q.inside == 0

    run(main())


def test_a_waiter_withdrawn_gives_back_its_place():
    async def main():
        q = FairQueue(capacity=4, serving=1, max_wait=60)
        c = Clients(q)
        holder = c.send("10.0.0.1")
        await settle()
        gone = c.send("198.51.100.1")
        after = c.send("192.0.2.1")
        await settle()
        c.tasks[gone][1].cancel()
        await settle()
        assert q.inside == 2
        c.finish(holder)
        await settle()
        assert c.order == [holder, after]
        c.finish(after)
        assert q.inside == 0 and q.stats()["waiting"] == 0

    run(main())
