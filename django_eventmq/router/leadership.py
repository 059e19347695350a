"""Leadership of a router group, held as a lease row in PostgreSQL.

Several routers of one *group* share one PostgreSQL journal; exactly one of
them leads (serves and writes). The lease is one row in ``emq_<group>.lease``:
an *epoch* that grows by one at every takeover, the member and backend pid
that hold it, and when it runs out. PostgreSQL's clock (``clock_timestamp()``)
decides expiry, never the routers' clocks. A standby takes the lease when there
is none, when it expired, or when the backend pid that holds it is gone from
``pg_stat_activity`` (the leader's connection died), so failover after a crash
takes one standby poll. The leader's journal fences every transaction it
commits with :func:`fence`: an UPDATE that matches only its own epoch, so a
deposed leader's writes fail with :class:`LeadershipLost` instead of landing.
"""

from __future__ import annotations

from django_eventmq.errors import EventMQError


class LeadershipLost(EventMQError):
    """Another member leads the group now (a newer epoch); stop writing and step down."""
