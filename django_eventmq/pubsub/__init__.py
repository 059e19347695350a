"""Publish/subscribe: ``publish()`` and ``@subscriber``, the publisher process and the
subscriber consumer."""
