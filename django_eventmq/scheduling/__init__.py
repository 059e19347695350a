"""Periodic jobs: timing maths, schedule identity, ``schedule()`` over the wire and the
scheduler process (``emq_scheduler``)."""
