"""The runtime: settings, transport, router, job manager, worker pool, client.

Standard library and pyzmq only; never imports Django.
"""
