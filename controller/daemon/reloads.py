"""Intent reloads: SIGHUP, `ReloadIntent` (railctl reload [--force]) and `DiffIntent` (railctl
diff), all planned by one loader off the event loop.

Whatever the file holds (nothing, a directory, binary, a huge file, another fabric, a file the
planner fails on), a reload is either taken or refused with an `intent_refused` event and an
ERROR line, and the controller keeps serving the intent it has: a reload never ends the daemon.
Each reload also loads the TLS certificates again (bad files are refused: ServerTls.reload).
A reload that would withdraw more than `--reload-max-withdraw` of the installed routes (summed
over switches) is refused the same way unless forced; SIGHUP never forces. Reloads run one at
a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import partial
from pathlib import Path

from controller import intent_keys
from controller.daemon import intent_diff
from controller.daemon.core_planner import CorePlanner, load_planner
from controller.daemon.runner import Runner
from controller.intent import load_fabric_text
from controller.yamlnodes import IntentError
from railfabric import tls
from railfabric.v1 import admin_pb2

log = logging.getLogger("railfabric.controller")

# The default share of installed routes a reload may withdraw without being forced.
DEFAULT_MAX_WITHDRAW = 0.25


class ReloadRefused(Exception):
    """The reload was refused and the previous intent is still served; the text says why."""


class IntentInvalid(ReloadRefused):
    """The file does not load or plan (the loader's `file:line: field: what`)."""


class TooManyWithdrawn(ReloadRefused):
    """The new intent withdraws more than --reload-max-withdraw of the installed routes."""


def prepare(planner: CorePlanner, serving: str, where: str) -> CorePlanner:
    """On a worker thread: check a loaded intent as a reload takes it. Raises IntentError."""
    if planner.fabric_name != serving:
        # Another fabric's switches, links and routing log mean nothing to this one.
        raise IntentError(
            where,
            0,
            "name",
            f"the file is fabric {planner.fabric_name!r} but this controller serves "
            f"{serving!r}; restart the controller to serve another fabric",
        )
    # core.reload builds every switch's state on the loop; building each once here first
    # turns a planner that fails into a refusal instead of an exception half-way through
    # core.reload (which would end the daemon with the core half-changed).
    for info in planner.switches():
        planner.state_parts(info.name)
    return planner


def load_text(text: str, file_name: str) -> CorePlanner:
    """An intent sent as text (DiffIntent), held to the file size limit the loader keeps."""
    limit = intent_keys.LIMITS["file_bytes"].high
    size = len(text.encode())
    if size > limit:
        raise IntentError(file_name, 0, "", f"{size} bytes; intent files are at most {limit}")
    return CorePlanner(load_fabric_text(text, file_name))


def _reason(err: Exception, where: str) -> str:
    return str(err) if isinstance(err, IntentError) else f"{where}: {err!r}"


class Reloader:
    def __init__(
        self,
        path: Path,
        runner: Runner,
        server_tls: tls.ServerTls | None = None,
        max_withdraw: float = DEFAULT_MAX_WITHDRAW,
    ) -> None:
        self.path = path
        self.runner = runner
        self.server_tls = server_tls
        self.max_withdraw = max_withdraw
        self._lock = asyncio.Lock()

    async def on_signals(self, wake: asyncio.Event) -> None:
        """Owned task: a guarded reload on every SIGHUP (`wake`)."""
        while True:
            await wake.wait()
            wake.clear()
            with contextlib.suppress(ReloadRefused):  # said in the log and the events
                await self.reload(force=False)

    async def reload(self, *, force: bool, who: str = "SIGHUP") -> admin_pb2.ReloadIntentResponse:
        """Load the --fabric file (and the TLS certificates) again and serve it. Raises
        IntentInvalid or TooManyWithdrawn (unless `force`) after the `intent_refused` event."""
        async with self._lock:
            if self.server_tls is not None:
                self.server_tls.reload()
            core = self.runner.core
            where = str(self.path)
            running = intent_diff.running(core)

            def plan() -> tuple[CorePlanner, admin_pb2.DiffIntentResponse]:
                planner = prepare(load_planner(self.path), running.fabric_name, where)
                return planner, intent_diff.diff(running, planner)

            try:
                planner, change = await asyncio.to_thread(plan)
            except Exception as err:  # whatever the file does, the daemon keeps serving
                reason = _reason(err, where)
                self.runner.input(partial(core.intent_refused, reason))
                raise IntentInvalid(reason) from None
            share = intent_diff.withdraw_share(change)
            over = share > self.max_withdraw
            if over and not force:
                reason = (
                    f"{where}: the new intent withdraws {change.routes_withdrawn} of the "
                    f"{change.routes_installed} installed routes ({share:.0%}), more than "
                    f"--reload-max-withdraw {self.max_withdraw:g} allows; see them with "
                    f"`railctl diff {where}`, and apply it with `railctl reload --force`"
                )
                self.runner.input(partial(core.intent_refused, reason))
                raise TooManyWithdrawn(reason)
            if over:
                log.warning(
                    "reload forced by %s: withdraws %d of %d installed routes (%.0f%%), past "
                    "--reload-max-withdraw %g",
                    who,
                    change.routes_withdrawn,
                    change.routes_installed,
                    share * 100,
                    self.max_withdraw,
                )
            self.runner.input(partial(core.reload, planner))
            log.info("reloaded %s (by %s)", self.path, who)
            return admin_pb2.ReloadIntentResponse(
                fabric_name=planner.fabric_name, diff=change, forced=over
            )

    async def diff(self, text: str, file_name: str) -> admin_pb2.DiffIntentResponse:
        """The running intent against `text`, loaded and checked as a reload would (IntentError
        when it would be refused); changes nothing."""
        running = intent_diff.running(self.runner.core)

        def plan() -> admin_pb2.DiffIntentResponse:
            try:
                planner = prepare(load_text(text, file_name), running.fabric_name, file_name)
            except IntentError:
                raise
            except Exception as err:
                raise IntentError(file_name, 0, "", f"the planner fails on it: {err!r}") from None
            return intent_diff.diff(running, planner)

        return await asyncio.to_thread(plan)
