"""The router (``emq_router``): clients and schedulers on the frontend, job managers on
the backend, the journal of accepted jobs, and the admin socket."""
