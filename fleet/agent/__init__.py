"""fleetdeck-agent: the NVML node agent (no Django; it runs on GPU nodes).

Modules: payloads (wire schema shared with the server), nvml (NvmlFacade over pynvml), runner (Agent loop
and httpx client), cli (`fleetdeck-agent`), gpu_check (`python -m fleet.agent.gpu_check`).
"""
