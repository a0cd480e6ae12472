"""LlamaIndex agent workflows: a watched LLM and watched tools, attached to an agent
(``FunctionAgent``, ``ReActAgent``) or to an ``AgentWorkflow``. (A ``CodeActAgent``'s
model is watched, but the code it writes calls the functions themselves.)

::

    from llama_index.core.agent.workflow import FunctionAgent
    from loopwatch import LoopDetected
    from loopwatch.integrations.llama_index import LoopwatchLlamaIndex

    watch = LoopwatchLlamaIndex(on_loop="skip")      # one per app; holds the Guard
    agent = watch.attach(FunctionAgent(tools=[web_search], llm=llm))
    try:
        response = await agent.run("Weather in Paris?")
    except LoopDetected as stop:
        print(stop.verdict.message)

:meth:`LoopwatchLlamaIndex.attach` replaces each agent's ``llm`` with a
:class:`LoopwatchLLM` (which calls it) and its ``tools`` with :class:`LoopwatchTool`
wrappers (same metadata: the model sees no difference). Both find the run they
belong to through the workflow's own step context (``Context.get_step_context()``).

* Each **tool** call is observed before it runs and its result after. On ``skip``
  and ``stop`` the tool does not run: its ``ToolOutput`` is the explanation (marked
  ``is_error``, so a ``return_direct`` tool does not end the run with it), and every
  tool call still gets its result.
* The **LLM** wrapper observes each response (its text; a handoff in an
  ``AgentWorkflow`` as a message from one agent to the other) and adds the pending
  warnings to the next request only, as a last user message after the tool results:
  the agent's memory and scratchpad never hold them, and no tool call is left
  without its result.
* On ``stop`` the LLM wrapper raises :class:`~loopwatch.LoopDetected` before the
  next model call (or right after the response that was stopped): the workflow
  ends, and ``await handler`` raises it. A tool cannot end the run itself: the
  agent turns every exception of a tool into a tool result for the model.

The run id is the conversation's, kept in the workflow ``Context``'s store under
``"loopwatch_run_id"``: a context reused across runs (``agent.run(msg, ctx=ctx)``)
is one conversation, a run without a context a new one; set the key yourself to
choose the id. Each run is a user turn (a ``user`` event with the user's message).
In an ``AgentWorkflow`` all agents share the context, so one run; the events carry
each agent's name. Agent workflows are async only; tools written as plain functions
are watched the same way (the agent calls every tool through ``acall``).
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Final

try:
    from llama_index.core.agent.workflow import AgentWorkflow, BaseWorkflowAgent
    from llama_index.core.base.llms.types import (
        ChatMessage,
        ChatResponse,
        ChatResponseAsyncGen,
        ChatResponseGen,
        CompletionResponse,
        CompletionResponseAsyncGen,
        CompletionResponseGen,
        LLMMetadata,
        MessageRole,
    )
    from llama_index.core.bridge.pydantic import Field, PrivateAttr
    from llama_index.core.llms.function_calling import FunctionCallingLLM
    from llama_index.core.llms.llm import LLM, ToolSelection
    from llama_index.core.tools import AsyncBaseTool, BaseTool, FunctionTool, ToolOutput
    from llama_index.core.tools.types import ToolMetadata
    from llama_index.core.workflow import Context
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "llama-index", "LlamaIndex (llama-index-core)") from _exc

from ..errors import LoopDetected
from ..findings import Action, Verdict
from ..guard import Guard
from ._common import NOT_RUN, PendingWarnings, aobserve_safely, content_text, log, make_guard

__all__ = ["RUN_ID_KEY", "LoopwatchLLM", "LoopwatchLlamaIndex", "LoopwatchTool"]

RUN_ID_KEY: Final = "loopwatch_run_id"
_STOPPED_MAX: Final = 10_000


class LoopwatchLlamaIndex:
    """Loop detection for LlamaIndex agent workflows; one per application.

    ``LoopwatchLlamaIndex()`` uses a guard configured from ``loopwatch.toml`` (or the
    defaults); keywords override it (``on_loop="skip"``...), or pass ``guard=``.
    """

    def __init__(self, guard: Guard | None = None, **config: Any) -> None:
        self.guard = make_guard(guard, config)
        self.pending = PendingWarnings()
        self._stopped: OrderedDict[str, Verdict] = OrderedDict()
        self._lock = threading.Lock()

    # -- wiring -----------------------------------------------------------------------
    def attach(self, target: Any) -> Any:
        """Watch an agent, or every agent of an ``AgentWorkflow``; returns ``target``.

        Each agent's ``llm`` becomes a :class:`LoopwatchLLM` and its ``tools``
        :class:`LoopwatchTool` wrappers (tools from a ``tool_retriever`` are not
        wrapped: wrap them with :meth:`tools`). Attaching twice does nothing more.
        """
        if isinstance(target, AgentWorkflow):
            agents = list(target.agents.values())
        elif isinstance(target, BaseWorkflowAgent):
            agents = [target]
        else:
            raise TypeError(
                f"attach() takes a LlamaIndex agent or AgentWorkflow, not {type(target).__name__}"
            )
        for agent in agents:
            if not isinstance(agent.llm, LoopwatchLLM):
                agent.llm = LoopwatchLLM(agent.llm, self, agent=agent.name)
            if agent.tools:
                agent.tools = list(self.tools(agent.tools, agent=agent.name))
        return target

    def tools(self, tools: Sequence[Any], agent: str | None = None) -> list[Any]:
        """``tools`` wrapped for the agent named ``agent``; plain functions become
        ``FunctionTool``s first, as the agents do."""
        wrapped: list[Any] = []
        for tool in tools:
            if isinstance(tool, LoopwatchTool):
                wrapped.append(tool)
            elif isinstance(tool, BaseTool):
                wrapped.append(LoopwatchTool(tool, self, agent))
            else:
                wrapped.append(LoopwatchTool(FunctionTool.from_defaults(tool), self, agent))
        return wrapped

    # -- runs ---------------------------------------------------------------------------
    async def run_id_of(self, ctx: Context) -> str:
        """The run id of the conversation ``ctx`` holds (made on first use)."""
        run = await ctx.store.get(RUN_ID_KEY, default=None)
        if isinstance(run, str) and run:
            return run
        run = f"li-{uuid.uuid4().hex}"
        await ctx.store.set(RUN_ID_KEY, run)
        return run

    async def _step_run(self) -> tuple[Context, str] | None:
        """The running step's context and run id; None outside a workflow step (the
        call is let through unobserved) or when they cannot be read."""
        try:
            ctx = Context.get_step_context()
        except Exception:  # not inside a workflow step
            return None
        try:
            return ctx, await self.run_id_of(ctx)
        except Exception:
            log.exception("loopwatch: reading the run id failed; letting the step through")
            return None

    # -- verdicts -----------------------------------------------------------------------
    async def observe(self, run: str, event: dict[str, Any]) -> Verdict:
        verdict = await aobserve_safely(self.guard, run, event)
        if verdict.action is Action.STOP:
            self.pending.discard(run)
            with self._lock:
                self._stopped.setdefault(run, verdict)
                while len(self._stopped) > _STOPPED_MAX:
                    self._stopped.popitem(last=False)
        elif verdict.action is Action.WARN:  # a skip's message is the call's result
            self.pending.add(run, verdict.message)
        return verdict

    def raise_if_stopped(self, run: str) -> None:
        """Raise the run's stop once: the conversation's next turn may go on."""
        with self._lock:
            verdict = self._stopped.pop(run, None)
        if verdict is not None:
            self.pending.discard(run)
            raise LoopDetected(verdict)


class LoopwatchLLM(FunctionCallingLLM):
    """An LLM that observes each response and delivers pending warnings; it calls
    the LLM it wraps for everything (a plain ``LLM`` works for ``ReActAgent``)."""

    inner: LLM = Field(description="The LLM this one calls.")
    agent: str | None = Field(default=None, description="The agent's name in the events.")
    _owner: LoopwatchLlamaIndex = PrivateAttr()

    def __init__(self, inner: LLM, owner: LoopwatchLlamaIndex, agent: str | None = None):
        super().__init__(inner=inner, agent=agent, callback_manager=inner.callback_manager)
        self._owner = owner

    @classmethod
    def class_name(cls) -> str:
        return "LoopwatchLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return self.inner.metadata

    # -- what loopwatch adds --------------------------------------------------------------
    async def _request(
        self, messages: Sequence[ChatMessage]
    ) -> tuple[str | None, list[ChatMessage]]:
        """The run id and the messages to send: a stopped run raises here, before the
        model is called; pending warnings go last, as a user message."""
        found = await self._owner._step_run()
        if found is None:
            return None, list(messages)
        ctx, run = found
        self._owner.raise_if_stopped(run)
        await self._user_turn(ctx, run, messages)
        self._owner.raise_if_stopped(run)
        warnings = self._owner.pending.take(run)
        if not warnings:
            return run, list(messages)
        # Last, after the tool results: a message between a tool call and its result,
        # or a system message in mid-conversation, is rejected by some providers.
        note = ChatMessage(role=MessageRole.USER, content="\n\n".join(warnings))
        return run, [*messages, note]

    async def _user_turn(self, ctx: Context, run: str, messages: Sequence[ChatMessage]) -> None:
        """The run's first model call (the agents count model calls per run in the
        context's ``num_iterations``) observes the user's message."""
        try:
            if await ctx.store.get("num_iterations", default=None) != 0:
                return
            text = await ctx.store.get("user_msg_str", default=None)
        except Exception:
            log.exception("loopwatch: reading the user's message failed")
            return
        if not isinstance(text, str):
            users = [m for m in messages if m.role == MessageRole.USER]
            text = users[-1].content or "" if users else ""
        await self._owner.observe(run, {"kind": "user", "text": text})

    async def _observed(self, run: str | None, response: ChatResponse) -> None:
        if run is None:
            return
        event: dict[str, Any] = {"kind": "model", "text": content_text(response.message.content)}
        if self.agent:
            event["agent"] = self.agent
        tokens = _tokens(response)
        if tokens:
            event["tokens"] = tokens
        await self._owner.observe(run, event)
        for call in self._calls(response):
            if call.tool_name == "handoff":  # AgentWorkflow's own tool, never wrapped
                kwargs = call.tool_kwargs if isinstance(call.tool_kwargs, dict) else {}
                handoff: dict[str, Any] = {"kind": "model", "text": str(kwargs.get("reason", ""))}
                if self.agent:
                    handoff["agent"] = self.agent
                handoff["to"] = str(kwargs.get("to_agent", ""))
                await self._owner.observe(run, handoff)
        self._owner.raise_if_stopped(run)

    def _calls(self, response: ChatResponse) -> list[ToolSelection]:
        if not isinstance(self.inner, FunctionCallingLLM):
            return []
        try:
            return self.inner.get_tool_calls_from_response(response, error_on_no_tool_call=False)
        except Exception:  # a provider's parser on a response without tool calls
            return []

    async def _stream(
        self, run: str | None, stream: ChatResponseAsyncGen
    ) -> AsyncGenerator[ChatResponse, None]:
        last: ChatResponse | None = None
        async for chunk in stream:
            last = chunk
            yield chunk
        if last is not None:
            await self._observed(run, last)

    async def _history(
        self, user_msg: str | ChatMessage | None, chat_history: list[ChatMessage] | None
    ) -> tuple[str | None, list[ChatMessage]]:
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            messages.append(ChatMessage(role=MessageRole.USER, content=user_msg))
        elif user_msg is not None:
            messages.append(user_msg)
        return await self._request(messages)

    # -- the calls the agents make (async) ---------------------------------------------------
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        run, request = await self._request(messages)
        response = await self.inner.achat(request, **kwargs)
        await self._observed(run, response)
        return response

    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        run, request = await self._request(messages)
        return self._stream(run, await self.inner.astream_chat(request, **kwargs))

    async def achat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        run, response = await self._with_tools(
            "achat_with_tools", tools, user_msg, chat_history, allow_parallel_tool_calls,
            verbose=verbose, tool_required=tool_required, **kwargs,
        )  # fmt: skip
        await self._observed(run, response)
        return response  # type: ignore[no-any-return]

    async def astream_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponseAsyncGen:
        run, stream = await self._with_tools(
            "astream_chat_with_tools", tools, user_msg, chat_history, allow_parallel_tool_calls,
            verbose=verbose, tool_required=tool_required, **kwargs,
        )  # fmt: skip
        return self._stream(run, stream)

    async def _with_tools(
        self,
        method: str,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None,
        chat_history: list[ChatMessage] | None,
        allow_parallel_tool_calls: bool,
        **kwargs: Any,
    ) -> tuple[Any, Any]:
        """The request with pending warnings, sent through the wrapped function-calling
        LLM's ``method``: the run it belongs to, and the LLM's answer."""
        llm = self._calling()
        run, request = await self._history(user_msg, chat_history)
        answer = await getattr(llm, method)(
            tools,
            chat_history=request,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            **kwargs,
        )
        return run, answer

    def _calling(self) -> FunctionCallingLLM:
        """The wrapped LLM, for the calls only a function-calling LLM has."""
        if not isinstance(self.inner, FunctionCallingLLM):
            raise TypeError(f"{type(self.inner).__name__} is not a function-calling LLM")
        return self.inner

    # -- everything else goes to the wrapped LLM as is ---------------------------------------
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        return self._calling()._prepare_chat_with_tools(
            tools,
            user_msg=user_msg,
            chat_history=chat_history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[BaseTool],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        if not isinstance(self.inner, FunctionCallingLLM):
            return response
        return self.inner._validate_chat_with_tools_response(
            response, tools, allow_parallel_tool_calls=allow_parallel_tool_calls, **kwargs
        )

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        return self._calling().get_tool_calls_from_response(
            response, error_on_no_tool_call=error_on_no_tool_call, **kwargs
        )

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self.inner.chat(messages, **kwargs)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return self.inner.stream_chat(messages, **kwargs)

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self.inner.complete(prompt, formatted=formatted, **kwargs)

    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        return self.inner.stream_complete(prompt, formatted=formatted, **kwargs)

    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        return await self.inner.acomplete(prompt, formatted=formatted, **kwargs)

    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        return await self.inner.astream_complete(prompt, formatted=formatted, **kwargs)


class LoopwatchTool(AsyncBaseTool):
    """A tool that asks loopwatch before calling the tool it wraps (same metadata)."""

    def __init__(self, inner: BaseTool, owner: LoopwatchLlamaIndex, agent: str | None) -> None:
        self.inner = inner
        self._owner = owner
        self._agent = agent

    @property
    def metadata(self) -> ToolMetadata:
        return self.inner.metadata

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        """The sync path (agent workflows never take it): the wrapped tool, unobserved."""
        return self.inner(*args, **kwargs)

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        inner = self.inner
        found = await self._owner._step_run()
        if found is None:
            return await _acall(inner, args, kwargs)
        ctx, run = found
        name = self.metadata.get_name()
        call: dict[str, Any] = {"kind": "tool_call", "name": name, "args": _arguments(args, kwargs)}
        result: dict[str, Any] = {"kind": "tool_result", "name": name}
        if self._agent:
            call["agent"] = result["agent"] = self._agent
        verdict = await self._owner.observe(run, call)
        if verdict.action is Action.SKIP or verdict.action is Action.STOP:
            message = verdict.message or NOT_RUN
            return ToolOutput(
                tool_name=name,
                content=message,
                raw_input={"args": args, "kwargs": kwargs},
                raw_output=message,
                is_error=True,
            )
        if isinstance(inner, FunctionTool) and inner.requires_context and inner.ctx_param_name:
            kwargs = {**kwargs, inner.ctx_param_name: ctx}  # what the agent does for it
        try:
            output = await _acall(inner, args, kwargs)
        except Exception as exc:
            result.update(text=f"{type(exc).__name__}: {exc}", error=True)
            await self._owner.observe(run, result)
            raise
        result["text"] = content_text(output.content)
        if output.is_error:
            result["error"] = True
        await self._owner.observe(run, result)
        return output


async def _acall(tool: BaseTool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ToolOutput:
    if isinstance(tool, AsyncBaseTool):
        return await tool.acall(*args, **kwargs)
    return tool(*args, **kwargs)


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call's arguments: the agents pass them by keyword."""
    if not args:
        return dict(kwargs)
    if len(args) == 1 and not kwargs:
        return args[0] if isinstance(args[0], dict) else {"input": args[0]}
    return {"args": list(args), **kwargs}


def _tokens(response: ChatResponse) -> int:
    """Tokens of one response, where the provider reports them (OpenAI-style counts in
    ``additional_kwargs``)."""
    extra = response.additional_kwargs
    total = extra.get("total_tokens")
    if isinstance(total, int):
        return total
    parts = [extra.get("prompt_tokens"), extra.get("completion_tokens")]
    return sum(p for p in parts if isinstance(p, int))
