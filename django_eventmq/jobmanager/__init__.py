"""The job manager (``emq_jobmanager``): its link to the router, the life of a job,
and the pool of worker children that run jobs."""
