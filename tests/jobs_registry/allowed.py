"""A module a test puts in ALLOWED_JOB_MODULES: its callables may run without @job."""


def double(x):
    return 2 * x


class Counter:
    def __init__(self, start=0):
        self.start = start

    def add(self, n):
        return self.start + n
