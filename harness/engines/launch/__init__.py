"""The engine kinds (EngineKind and its vLLM, SGLang and scripted subclasses): the command, environment
and request fields each arm is launched and driven with, and the settings it resolves to."""
