"""The agents' model calls on a cluster are made by the driver, which alone holds the API keys.

An episode on a worker asks its question through a mailbox -- a small Ray actor on the driver's node that
holds questions and answers, never a key -- and waits; a thread of the driver takes the questions, makes
each call with its own ModelService (the provider with the driver's keys, the response cache,
RUN_DIR/responses.jsonl) and posts the answer back. The episode charges the call to its budget as it would
on one machine (agents.model.ModelClient)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..agents.model import Answer, ModelService
from ..llm.providers import Request, parse_model
from .session import Session

log = logging.getLogger(__name__)
TAKE_S = 0.5  # how long the driver's thread waits for questions before it checks whether to stop


@dataclass(frozen=True)
class ModelCall:
    id: str
    request: Request
    method: str


class Mailbox:
    """The Ray actor (async): `ask` waits for its answer; the driver `take`s questions and `answer`s them."""

    def __init__(self) -> None:
        self.questions: asyncio.Queue = asyncio.Queue()
        self.waiting: dict[str, asyncio.Future] = {}

    async def ask(self, call: ModelCall) -> Answer:
        fut = asyncio.get_running_loop().create_future()
        self.waiting[call.id] = fut
        await self.questions.put(call)
        return await fut

    async def take(self, timeout_s: float) -> list[ModelCall]:
        try:
            calls = [await asyncio.wait_for(self.questions.get(), timeout_s)]
        except TimeoutError:
            return []
        while not self.questions.empty():
            calls.append(self.questions.get_nowait())
        return calls

    async def answer(self, call_id: str, answer: Answer) -> None:
        fut = self.waiting.pop(call_id, None)
        if fut is not None and not fut.done():
            fut.set_result(answer)


class MailboxService:
    """A worker's stand-in for agents.model.ModelService: each call is asked of the driver."""

    def __init__(self, mailbox, model: str):
        self.mailbox = mailbox
        self.ref = parse_model(model)
        self.replay = self.ref.provider == "replay"

    def answer(self, req: Request, method: str) -> Answer:
        import ray

        return ray.get(self.mailbox.ask.remote(ModelCall(uuid.uuid4().hex, req, method)))

    def close(self) -> None:
        pass


class ModelDesk(contextlib.AbstractContextManager):
    """The driver's side: the mailbox actor (on the driver's node) and the thread that answers it with
    `service`, `concurrency` calls at once."""

    def __init__(self, s: Session, service: ModelService, concurrency: int = 4):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.s, self.service = s, service
        here = NodeAffinitySchedulingStrategy(s.driver_node, soft=False)
        self.mailbox = s.ray.remote(Mailbox).options(num_cpus=0, scheduling_strategy=here).remote()
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ekb-model")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="ekb-model-desk", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        ray = self.s.ray
        while not self.stop.is_set():
            try:
                calls = ray.get(self.mailbox.take.remote(TAKE_S))
            except Exception as e:  # noqa: BLE001 -- the session is ending
                if not self.stop.is_set():
                    log.warning("the agents' model desk stopped: %s", e)
                return
            for call in calls:
                self.pool.submit(self._answer, call)

    def _answer(self, call: ModelCall) -> None:
        try:
            ans = self.service.answer(call.request, call.method)
        except Exception as e:  # noqa: BLE001 -- one call's failure is the episode's to record
            ans = Answer(None, error=f"{type(e).__name__}: {e}")
        self.mailbox.answer.remote(call.id, ans)

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.pool.shutdown(wait=True, cancel_futures=True)
        with contextlib.suppress(Exception):
            self.s.ray.kill(self.mailbox)
        self.service.close()
