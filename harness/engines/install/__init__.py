"""The engine environments: engines.lock.toml's pins, installing them, their wheels, versions and
packages, and SGLang's DeepGEMM kernels warmed ahead of a run."""
