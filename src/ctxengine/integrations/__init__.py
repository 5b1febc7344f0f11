"""ctxengine inside agent frameworks, each through the hook the framework has for shaping the
model's input, each behind its own extra:

- ``ctxengine.integrations.langchain``: ``ContextEngineMiddleware``, a LangChain v1
  ``AgentMiddleware`` for ``create_agent`` (extra ``langchain``);
- ``ctxengine.integrations.openai_agents``: ``ContextEngineFilter`` (a ``call_model_input_filter``
  with its ``RunHooks``) and ``EngineSession`` (a ``Session`` over our ``SessionStore``) for the
  OpenAI Agents SDK (extra ``openai-agents``);
- ``ctxengine.integrations.pydantic_ai``: ``ContextEngineProcessor``, a PydanticAI history
  processor (extra ``pydantic-ai``).

What they share (``bridge``): the framework hands over its whole history before each model call;
the new items are ingested into a ``ContextEngine`` as neutral messages, and the framework gets
the projection back as its own items (the originals where the engine left a message as it was).
Nothing here is imported by the rest of ctxengine.

May import: ``messages``, ``formats``, ``policy``, ``layers``, ``llm``, ``engine``, ``store``, ``replay``.
"""
