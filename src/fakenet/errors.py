"""fakenet's one exception type: setup, teardown or use of the fake internet went wrong."""


class FakeNetError(RuntimeError):
    pass
