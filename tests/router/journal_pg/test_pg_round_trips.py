"""What the PostgreSQL journal answers without a round trip to the server, and
that the answers stay right: parcels are kept until the next flush (one
pipelined round trip for all of them), a parcel's digest is known in memory,
and the poisoned list is read once and again only after a write that may
change it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from django_eventmq.protocol.batch import pack_jobs
from django_eventmq.router.journal.parcels import parcel_digest
from django_eventmq.router.journal.postgres import PostgresJournal
from django_eventmq.router.journal.schema import LEASED, POISONED, WAITING
from django_eventmq.router.leadership import LeadershipLost
from tests.router.journal_pg.conftest import Opener, add
from tests.router.test_journal import parcel

pytestmark = pytest.mark.postgres


def _frame(n: int, tag: bytes = b"p") -> bytes:
    return pack_jobs([(tag + b"%d" % i, b"email", b"guarantee", b'["run", {}]') for i in range(n)])


def _backend(other: psycopg.Connection[Any], journal: PostgresJournal) -> tuple[Any, str]:
    """When the journal's connection last sent a statement, and its state."""
    row = other.execute(
        "SELECT query_start, state FROM pg_stat_activity WHERE pid = %s",
        (journal.conn.info.backend_pid,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def _parcel(journal: PostgresJournal, seq: int, frame: bytes, count: int = 5) -> None:
    journal.add_parcel(parcel(seq, count, frame))


def _stored(other: psycopg.Connection[Any]) -> list[tuple[int, bytes | None]]:
    """Parcels stored, and their digests."""
    return [
        (int(seq), None if digest is None else bytes(digest))
        for seq, digest in other.execute(
            "SELECT p.seq, d.digest FROM parcels p LEFT JOIN parcel_digests d USING (seq)"
            " ORDER BY p.seq"
        )
    ]


# -- parcels ------------------------------------------------------------------------------
def test_a_parcel_is_kept_until_the_commit_and_known_without_a_query(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal = open_journal()
    frame = _frame(5)
    before = _backend(other, journal)
    _parcel(journal, 10, frame)
    _parcel(journal, 15, _frame(3, b"q"), count=3)
    assert journal.holds_parcel(parcel_digest(frame))
    assert not journal.holds_parcel(parcel_digest(_frame(4)))
    assert journal.parcel_count() == 2 and journal.pending == 8
    # Nothing sent yet: no statement, no transaction open, nothing to see.
    assert _backend(other, journal) == before
    assert _stored(other) == []
    assert journal.commit()
    assert _stored(other) == [(10, parcel_digest(frame)), (15, parcel_digest(_frame(3, b"q")))]
    assert journal.pending == 0


def test_reads_of_parcels_see_the_kept_ones(open_journal: Opener) -> None:
    journal = open_journal()
    _parcel(journal, 10, _frame(5))
    assert journal.next_parcel("email", None) == 10
    assert journal.parcels_holding("p3") == [10]
    assert journal.max_seq() == 14 and not journal.is_empty()
    assert journal.counts()[WAITING] == {"email": 5}
    _parcel(journal, 20, _frame(2, b"r"), count=2)
    assert journal.open_parcel(20, skip={"r0"}) == ("email", 1)
    assert journal.find("r1") is not None
    journal.commit()


def test_the_same_frame_again_takes_the_digest_kept_or_stored(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    frame = _frame(5)
    digest = parcel_digest(frame)
    journal = open_journal()
    _parcel(journal, 10, frame)
    _parcel(journal, 20, frame)  # within one flush: the later parcel has the digest
    journal.commit()
    assert _stored(other) == [(10, None), (20, digest)]
    _parcel(journal, 30, frame)  # the digest stored already gives way
    journal.commit()
    assert _stored(other) == [(10, None), (20, None), (30, digest)]
    journal.open_parcel(10, skip=set())
    journal.open_parcel(20, skip=set())
    assert journal.holds_parcel(digest)  # parcel 30 still holds it
    journal.open_parcel(30, skip=set())
    assert not journal.holds_parcel(digest)
    journal.commit()
    assert _stored(other) == [] and journal.parcel_count() == 0
    journal.close()
    assert not open_journal().holds_parcel(digest)


def test_digests_are_loaded_on_opening_only_for_parcels_still_there(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal = open_journal()
    _parcel(journal, 10, _frame(5))
    _parcel(journal, 20, _frame(5, b"x"))
    journal.commit()
    journal.close()
    other.execute("DELETE FROM parcels WHERE seq = 10")  # its digest row is left
    journal = open_journal()
    assert not journal.holds_parcel(parcel_digest(_frame(5)))
    assert journal.holds_parcel(parcel_digest(_frame(5, b"x")))


def test_a_kept_parcel_that_cannot_be_stored_fails_its_commit_and_stores_nothing(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal = open_journal()
    _parcel(journal, 10, _frame(5))
    journal.commit()
    add(journal, 1)
    _parcel(journal, 10, _frame(5, b"y"))  # seq 10 is stored: the flush fails
    with pytest.raises(LeadershipLost):
        journal.commit()
    assert journal.closed and journal.failure is not None
    with pytest.raises(LeadershipLost):
        journal.holds_parcel(parcel_digest(_frame(5)))
    with pytest.raises(LeadershipLost):
        _parcel(journal, 30, _frame(1, b"z"), count=1)
    assert _stored(other) == [(10, parcel_digest(_frame(5)))]
    assert other.execute("SELECT COUNT(*) FROM jobs").fetchone() == (0,)


# -- poisoned jobs ----------------------------------------------------------------------------
def _listed(journal: PostgresJournal, limit: int = 100) -> list[tuple[str, int, str]]:
    return [(row.msgid, row.deaths, reason) for row, reason in journal.poisoned(limit)]


def test_the_poisoned_list_is_read_once_until_a_write_changes_it(
    open_journal: Opener, other: psycopg.Connection[Any]
) -> None:
    journal = open_journal()
    for seq in (1, 2, 3):
        add(journal, seq, state=LEASED)
    journal.commit()
    assert _listed(journal) == []
    before = _backend(other, journal)
    journal.set_state(1, WAITING)  # not a poisoned job: the list stands
    journal.requeue(2, deaths=1)
    assert _listed(journal) == []
    assert _backend(other, journal) == before
    journal.poison(3, deaths=3, reason="died 3 times")
    assert _listed(journal) == [("m3", 3, "died 3 times")]
    journal.commit()
    before = _backend(other, journal)
    assert _listed(journal) == [("m3", 3, "died 3 times")]
    assert _backend(other, journal) == before


@pytest.mark.parametrize("change", ["requeue", "delete", "poison", "add", "limit"])
def test_the_poisoned_list_follows_every_write_that_changes_it(
    open_journal: Opener, change: str
) -> None:
    journal = open_journal()
    for seq in (1, 2, 3):
        add(journal, seq, state=LEASED)
    journal.poison(2, deaths=3, reason="two")
    journal.poison(3, deaths=3, reason="three")
    assert _listed(journal) == [("m2", 3, "two"), ("m3", 3, "three")]
    if change == "requeue":  # a poisoned job handed out again
        journal.requeue(2, deaths=0)
        expected = [("m3", 3, "three")]
    elif change == "delete":  # a CANCEL clears it
        journal.delete(3)
        expected = [("m2", 3, "two")]
    elif change == "poison":
        journal.poison(1, deaths=4, reason="one")
        expected = [("m1", 4, "one"), ("m2", 3, "two"), ("m3", 3, "three")]
    elif change == "add":  # a row stored poisoned (not something the router does)
        add(journal, 4, state=POISONED)
        expected = [("m2", 3, "two"), ("m3", 3, "three"), ("m4", 0, "")]
    else:
        assert _listed(journal, 1) == [("m2", 3, "two")]
        expected = [("m2", 3, "two"), ("m3", 3, "three")]
    assert _listed(journal) == expected
    journal.commit()
    journal.close()
    assert _listed(open_journal()) == expected


def test_the_poisoned_list_of_a_dead_journal_is_not_answered(
    open_journal: Opener,
) -> None:
    journal = open_journal()
    add(journal, 1, state=LEASED)
    journal.poison(1, deaths=3, reason="x")
    assert len(journal.poisoned()) == 1
    journal.conn.close()
    with pytest.raises(LeadershipLost):
        journal.commit()
    with pytest.raises(LeadershipLost):
        journal.poisoned()
