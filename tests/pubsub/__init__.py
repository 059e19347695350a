"""Publish/subscribe tests.

Also a Django app (``tests.pubsub``) for the consumer process, whose
``subscribers.py`` ``emq_subscribe`` discovers on its own.
"""
