"""A service the proxy depends on (the session store, the lock service, the job queue): its
failures counted, and said once per outage (``Outage``)."""

from __future__ import annotations

import logging

log = logging.getLogger("ctxengine.proxy")


class Outage:
    """A service the proxy depends on: a warning when it fails, once until it works again."""

    def __init__(
        self, what: str, meanwhile: str = "its sessions' requests go upstream unchanged until it is back"
    ) -> None:
        self.what, self.meanwhile = what, meanwhile
        self.down = False
        self.failures = 0

    def failed(self, exc: BaseException) -> None:
        self.failures += 1
        if not self.down:
            self.down = True
            log.warning(
                "proxy: %s failed (%s: %s); %s",
                self.what, type(exc).__name__, exc, self.meanwhile,
            )  # fmt: skip

    def ok(self) -> None:
        if self.down:
            self.down = False
            log.warning("proxy: %s is back", self.what)
